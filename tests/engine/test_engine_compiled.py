"""The compiled decode step gives what the eager one gives: the same greedy tokens in fp32, the
same logits within bf16's rounding, for a lone request and for batches of mixed lengths. New
graphs compile at the lowest priority; auto compiles wherever the configuration has a compiled
step (the service's default end to end: tests/service/test_service_compiled.py)."""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pytest
import torch

from minisgl_core.engine.attention import build_metadata
from minisgl_core.engine.compile_choice import AUTO_ON, resolve_compile
from minisgl_core.testing.compiled_runs import compiled_runs
from minisgl_core.wire.schema import SamplingParams

GREEDY = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)


def _prompts(vocab: int) -> dict[str, list[int]]:
    rng = random.Random(11)
    # different lengths, so the batch graph's mask matters; "a" starts with a context of 3 keys
    return {name: [rng.randrange(3, vocab) for _ in range(n)]
            for name, n in {"a": 2, "b": 9, "c": 23, "d": 5}.items()}


def _greedy(engine, prompts, drain, tokens_of) -> dict[str, list[int]]:
    """Request "a" alone for a few steps (batch 1), then the rest join it (batches 2-4)."""
    engine.add_request("a", prompts["a"], GREEDY)
    early: list[int] = []
    for _ in range(4):
        early += [t for o in engine.step() for t in o.token_ids]
    for rid in ("b", "c", "d"):
        engine.add_request(rid, prompts[rid], GREEDY)
    outs = drain(engine)
    engine.check_idle_invariant()
    return {rid: (early if rid == "a" else []) + tokens_of(outs[rid]) for rid in prompts}


@pytest.fixture(scope="module")
def compiled_fp32(make_engine):
    engine = make_engine("llama", page_size=4, compile=True)
    assert engine.compiled is not None and engine.compiled.wait(600), engine.compiled.status()
    # one graph per step: whatever dynamo cannot trace would split it (and run between graphs)
    assert not torch._dynamo.utils.counters["graph_break"]
    return engine


def test_compiled_step_gives_the_eager_greedy_tokens(compiled_fp32, make_engine, drain,
                                                     tokens_of, monkeypatch) -> None:
    # each step calls its graph from dynamo's cache entry (direct_graphs.py); dynamo's own path
    # runs only where no graph's guards pass, which no step here is
    compiled = compiled_fp32.compiled
    assert len(compiled._direct.entries) == 2
    through_dynamo: list[int] = []
    run_only = compiled._run_only
    monkeypatch.setattr(compiled, "_run_only",
                        lambda *args: through_dynamo.append(args[1].shape[0]) or run_only(*args))
    eager = make_engine("llama", page_size=4)
    prompts = _prompts(eager.vocab_size)
    want = _greedy(eager, prompts, drain, tokens_of)
    graphs, got = compiled_runs(lambda: _greedy(compiled_fp32, prompts, drain, tokens_of))
    assert got == want
    # both graphs served: batch 1 while "a" ran alone, the batch graph once the others joined;
    # every step after the prefills is a decode step
    assert len(graphs) == 2 and sum(graphs.values()) >= GREEDY.max_tokens
    assert through_dynamo == []
    assert compiled_fp32.info()["compile"] == "on" and eager.info()["compile"] == "off"


def test_a_short_prefill_runs_in_the_graph_and_a_long_one_eagerly(compiled_fp32, make_engine,
                                                                   drain, tokens_of,
                                                                   monkeypatch) -> None:
    one = SamplingParams(max_tokens=1, temperature=0.0)
    rng = random.Random(5)
    # 3 tokens read 6 keys, folded into decode rows; 100 read 5,050, over a budget of 1,000 keys
    # (the tiny model's own, from its few KV bytes a token, would fold both): the extend path
    short, long = ([rng.randrange(3, compiled_fp32.vocab_size) for _ in range(n)] for n in (3, 100))
    monkeypatch.setattr(compiled_fp32, "fold_keys", 1000)
    eager = make_engine("llama", page_size=4)
    for rid, prompt, compiled in (("s", short, True), ("l", long, False)):
        compiled_fp32.add_request(rid, prompt, one)  # a prefill step only: nothing to decode
        graphs, outs = compiled_runs(lambda: drain(compiled_fp32))
        eager.add_request(rid, prompt, one)
        assert tokens_of(outs[rid]) == tokens_of(drain(eager)[rid])
        assert bool(graphs) is compiled, (rid, graphs)


def _decode_logits(engine, prompts: list[list[int]], drain) -> torch.Tensor:
    """Prefill ``prompts``, then the logits ``[B, V]`` of one decode step run through
    ``engine.forward`` on that cache state (nothing appended); the requests then finish."""
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(max_tokens=4, temperature=0.0,
                                                     ignore_eos=True))
    engine.step()  # prefills them all
    running = list(engine.batcher.running)
    decode = [(r.pages, r.num_cached + 1) for r in running]
    with torch.inference_mode():  # as in Engine.step: the graphs guard on inference tensors
        ids = torch.tensor([r.output_ids[-1] for r in running])
        meta = build_metadata(decode, [], engine.page_size, engine.device)
        graphs, head_in = compiled_runs(lambda: engine.forward(ids, meta, engine.kv,
                                                                engine.workspace))
        logits = engine.head(head_in)
    assert sum(graphs.values()) == (1 if engine.compiled is not None else 0)
    drain(engine)
    return logits.float()


def test_compiled_bf16_step_matches_eager_within_bf16_rounding(make_engine, drain) -> None:
    compiled = make_engine("llama", page_size=4, dtype="bfloat16", compile=True)
    assert compiled.compiled.wait(600), compiled.compiled.status()
    eager = make_engine("llama", page_size=4, dtype="bfloat16")
    prompts = list(_prompts(eager.vocab_size).values())
    for batch in (1, 3):  # both graphs
        got = _decode_logits(compiled, prompts[:batch], drain)
        want = _decode_logits(eager, prompts[:batch], drain)
        # fused kernels round once where eager rounds after every op: a few bf16 ulps
        scale = want.abs().max().item()
        assert (got - want).abs().max().item() <= 0.03 * scale, batch
        assert torch.equal(got.argmax(-1), want.argmax(-1)), batch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority: Linux")
def test_new_graphs_compile_on_a_thread_at_the_lowest_priority(compiled_fp32,
                                                               monkeypatch) -> None:
    from minisgl_core.engine.compiled import CompiledDecode

    engine = compiled_fp32
    seen: list[int] = []
    compiler = CompiledDecode(engine.model, engine.kv, engine.workspace, engine.device)
    monkeypatch.setattr(compiler, "_compile_all", lambda doing: seen.append(
        os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
    compiler.start(f"a configuration no engine had {time.time_ns()}")
    assert not compiler.marker.exists() and compiler.wait(30) is False  # nothing compiled
    assert seen == [19] and not compiler.loaded_before_ready


def test_the_one_request_graph_runs_its_fused_code_on_one_thread(compiled_fp32,
                                                                 monkeypatch) -> None:
    from minisgl_core.engine.compiled import CompiledDecode

    engine = compiled_fp32
    compiler = CompiledDecode(engine.model, engine.kv, engine.workspace, engine.device)
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(compiler, "_compiled", lambda model, ids, *rest: seen.append(
        (ids.shape[0], torch._inductor.config.cpp.threads)))
    compiler.compile_now()
    assert seen == [(1, 1), (2, -1)]  # -1: inductor's default, every thread torch has


def test_two_compiled_engines_in_one_process_each_run_their_own_graphs(compiled_fp32, make_engine,
                                                                        drain,
                                                                        tokens_of) -> None:
    # a graph guards only on the step's inputs, not on the model (step_guards.py): another
    # engine's graphs, for a model of another shape (qwen3: q/k norms), would pass its guards
    other = make_engine("qwen3", page_size=4, compile=True)
    assert other.compiled.wait(600), other.compiled.status()
    for engine, arch in ((other, "qwen3"), (compiled_fp32, "llama")):
        eager = make_engine(arch, page_size=4)
        prompts = _prompts(eager.vocab_size)
        want = _greedy(eager, prompts, drain, tokens_of)
        graphs, got = compiled_runs(lambda e=engine, p=prompts: _greedy(e, p, drain, tokens_of))
        assert got == want, arch
        assert len(graphs) == 2, (arch, graphs)


def test_graphs_keep_the_guards_on_the_steps_inputs_only() -> None:
    from types import SimpleNamespace

    from minisgl_core.engine.step_guards import keep_input_guards, own_copy

    names = ["", "input_ids", "kv_index", "mask", "model", "model.layers[0].qkv.handle",
             "type(model.layers[0].o).__call__", "G['__import_torch']", "kv.quantized",
             "input_ids_of_another", "dict(type(model).__mro__[0].__dict__)['deterministic']"]
    keep = keep_input_guards(("input_ids", "kv_index", "mask"))
    kept = keep([SimpleNamespace(name=n) for n in names])
    kept_names = [n for n, k in zip(names, kept, strict=True) if k]
    assert kept_names == ["", "input_ids", "kv_index", "mask"]

    def step(x: int, y: int = 2) -> int:
        return x + y

    copy = own_copy(step)
    assert copy.__code__ is not step.__code__ and copy(1) == step(1) == 3


def test_auto_compiles_unless_the_configuration_has_no_compiled_step(monkeypatch) -> None:
    from minisgl_core.engine import compile_choice

    class Plain:  # a model with no batch-invariant compiled step
        pass

    class Invariant:
        compiles_deterministic = True

    assert resolve_compile(None, Plain(), "cpu", False) == (True, AUTO_ON)
    assert resolve_compile(None, Invariant(), "cpu", True) == (True, AUTO_ON)
    on, why = resolve_compile(None, Plain(), "cpu", True)
    assert not on and "Plain's compiled step is not batch-invariant" in why
    assert resolve_compile(False, Plain(), "cpu", False) == (False, "off (asked for)")
    assert resolve_compile(True, Plain(), "cpu", False) == (True, "on (asked for)")
    monkeypatch.setattr(compile_choice, "c_compiler", lambda: None)
    on, why = resolve_compile(None, Plain(), "cpu", False)
    assert not on and "no C++ compiler" in why
    assert resolve_compile(None, Plain(), "cuda:0", False) == (True, AUTO_ON)  # triton's


def _inductor_cache_of(env: dict[str, str]) -> str:
    import subprocess

    code = "from minisgl_core.engine.compiled import inductor_cache; print(inductor_cache())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_graphs_of_other_vector_code_are_cached_apart(tmp_path) -> None:
    # graphs compiled where ATen ran AVX-512 and loaded where it ran AVX2 made wrong tokens, so
    # each kind of code the process may run gets its own inductor cache (ATEN_CPU_CAPABILITY
    # default: no vector code at all, which differs from any x86 host's own)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCHINDUCTOR_CACHE_DIR", "ATEN_CPU_CAPABILITY")}
    env["MINISGL_CACHE_DIR"] = str(tmp_path)
    own = _inductor_cache_of(env)
    scalar = _inductor_cache_of({**env, "ATEN_CPU_CAPABILITY": "default"})
    assert own != scalar
    assert os.path.dirname(own) == os.path.dirname(scalar) == str(tmp_path / "inductor")
    assert os.path.basename(scalar).startswith("default-")
    assert _inductor_cache_of({**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "x")}) \
        == str(tmp_path / "x")  # the user's own folder is taken as it is
