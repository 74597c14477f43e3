"""--deterministic: a request's tokens and logprobs do not depend on the other requests of its
batch, on where prefill chunks end, on speculation or on compilation (fp32 and bf16).

Logprobs are compared exactly: equal floats mean equal logits, a far stronger check than equal
greedy tokens (on a tiny random model those rarely flip; without --deterministic the logprobs
of these same runs differ)."""

from __future__ import annotations

import random

import pytest

from minisgl_core.engine.config import EngineConfig
from minisgl_core.testing.compiled_runs import compiled_runs
from minisgl_core.wire.schema import SamplingParams

CASES = [("llama", "float32"), ("qwen3", "bfloat16"), ("gemma3", "bfloat16")]


def _prompts(vocab: int, n: int = 32) -> list[list[int]]:
    rng = random.Random(17)
    return [[rng.randrange(3, vocab) for _ in range(rng.randrange(3, 40))] for _ in range(n)]


def _run(engine, prompts, sampling: SamplingParams | list[SamplingParams], drain,
         ) -> dict[str, list[tuple[int, float | None]]]:
    """Every request's (token, logprob) pairs, all added at once."""
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, sampling[i] if isinstance(sampling, list) else sampling)
    out = drain(engine)
    engine.check_idle_invariant()
    return {rid: [(t, lp.logprob if o.logprobs else None) for o in outs
                  for t, lp in zip(o.token_ids, o.logprobs or [None] * len(o.token_ids),
                                   strict=True)]
            for rid, outs in out.items()}


GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True, logprobs=0)


@pytest.mark.parametrize(("arch", "dtype"), CASES)
def test_alone_equals_among_31_others_and_any_chunking(arch, dtype, make_engine, drain) -> None:
    def engine(**options):
        return make_engine(arch, dtype=dtype, deterministic=True, num_threads=2, page_size=4,
                           **options)

    prompts = _prompts(engine().vocab_size)
    batch = _run(engine(), prompts, GREEDY, drain)
    for i in (0, 13, 31):  # first, middle and last row of the batch
        alone = _run(engine(), [prompts[i]], GREEDY, drain)["0"]
        assert alone == batch[str(i)], f"{arch} {dtype}: request {i}"
    # prompts cut into chunks of 5 tokens, several requests' chunks in one step
    chunked = _run(engine(max_prefill_tokens=5), prompts[:8], GREEDY, drain)
    assert all(chunked[str(i)] == batch[str(i)] for i in range(8))


def test_seeded_sampling_alone_equals_in_a_batch(make_engine, drain) -> None:
    def engine():
        return make_engine("qwen3", dtype="bfloat16", deterministic=True, num_threads=2)

    prompts = _prompts(engine().vocab_size, 16)
    sampled = [SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, seed=100 + i,
                              ignore_eos=True, logprobs=0) for i in range(16)]
    batch = _run(engine(), prompts, sampled, drain)
    for i in (0, 9):
        assert _run(engine(), [prompts[i]], [sampled[i]], drain)["0"] == batch[str(i)]


def test_speculation_gives_the_plain_tokens(make_engine, drain) -> None:
    def engine(**options):
        return make_engine("llama", dtype="bfloat16", deterministic=True, num_threads=2,
                           **options)

    rng = random.Random(5)
    # prompts that repeat themselves: n-gram drafts are proposed and some accepted
    prompts = [[rng.randrange(3, 200) for _ in range(6)] * 4 for _ in range(12)]
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    plain = _run(engine(), prompts, greedy, drain)
    spec_engine = engine(speculative="ngram", prompt_lookup_min=1)
    spec = _run(spec_engine, prompts, greedy, drain)
    assert spec == plain
    assert spec_engine.stats().spec_accepted_tokens > 0
    assert _run(engine(speculative="ngram", prompt_lookup_min=1), prompts[:1], greedy,
                drain)["0"] == plain["0"]


@pytest.mark.parametrize("scheme", ["int8-wo", "int4"])
def test_weight_only_is_batch_invariant(scheme, make_engine, drain) -> None:
    def engine():
        return make_engine("qwen2", deterministic=True, num_threads=2, quantization=scheme)

    prompts = _prompts(engine().vocab_size, 8)
    batch = _run(engine(), prompts, GREEDY, drain)
    assert _run(engine(), [prompts[5]], GREEDY, drain)["0"] == batch["5"]
    names = {k.name for ks in engine().model.kernels.kernels.values() for k in ks}
    assert f"{scheme}-invariant" in names
    assert names <= {"int8-wo-invariant", "int4-invariant", "invariant"}


def test_compiled_steps_give_the_eager_bits(make_engine, drain) -> None:
    eager = make_engine("qwen3", dtype="bfloat16", deterministic=True, num_threads=2)
    compiled = make_engine("qwen3", dtype="bfloat16", deterministic=True, num_threads=2,
                           compile=True)
    assert compiled.compiled is not None and compiled.compiled.wait(600), \
        compiled.compiled.status()
    prompts = _prompts(eager.vocab_size, 6)
    want = _run(eager, prompts, GREEDY, drain)
    graphs, got = compiled_runs(lambda: _run(compiled, prompts, GREEDY, drain))
    assert got == want
    assert sum(graphs.values()) >= GREEDY.max_tokens - 1  # the decode steps ran compiled


def test_what_deterministic_cannot_take_is_refused(make_engine) -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype auto"):
        EngineConfig(model="m", deterministic=True, kv_cache_dtype="int8")
    with pytest.raises(ValueError, match="quantization int8"):
        EngineConfig(model="m", deterministic=True, quantization="int8")
    with pytest.raises(ValueError, match="compiled step is not batch-invariant"):
        make_engine("gemma3", deterministic=True, compile=True)


def test_off_by_default_and_kernels_by_bucket(make_engine) -> None:
    assert not EngineConfig(model="m").deterministic
    engine = make_engine("llama", deterministic=True)
    kernels = engine.model.kernels
    assert {k.name for ks in kernels.kernels.values() for k in ks} == {"invariant"}


def test_tp2_alone_equals_in_a_batch(tiny_models) -> None:
    # at one --tp, a request's tokens do not depend on its batch either (each rank's kernels are
    # batch-invariant and the all-reduce adds the ranks in rank order)
    from minisgl_core.testing.tp import generate_tp

    prompts = _prompts(200, 12)
    opts = {"num_threads": 1, "num_pages": 128, "deterministic": True}
    batch, _ = generate_tp(str(tiny_models["qwen3"]), prompts, 10, 2, **opts)
    alone, _ = generate_tp(str(tiny_models["qwen3"]), prompts[7:8], 10, 2, **opts)
    assert alone[0] == batch[7]


def test_offline_llm_takes_deterministic(tiny_models) -> None:
    from minisgl_core.offline import LLM

    llm = LLM(str(tiny_models["llama"]), dtype="float32", deterministic=True)
    assert llm.engine.config.deterministic
    assert {k.name for ks in llm.engine.model.kernels.kernels.values() for k in ks} == \
        {"invariant"}
