"""Greedy decoding equals transformers token for token on tiny Llama, Qwen2 and Qwen3 models."""

from __future__ import annotations

import random

import pytest

from minisgl_core.wire.schema import SamplingParams

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


def _prompts(vocab: int, seed: int) -> dict[str, list[int]]:
    rng = random.Random(seed)
    # lengths straddle page boundaries (page_size 4); "long" needs three 24-token chunks
    lengths = {"short": 3, "medium": 10, "long": 61, "late": 17}
    return {k: [rng.randrange(3, vocab) for _ in range(n)] for k, n in lengths.items()}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_mixed_batch_matches_transformers(arch, make_engine, hf_greedy, drain, tokens_of) -> None:
    engine = make_engine(arch, page_size=4, max_prefill_tokens=24)
    prompts = _prompts(engine.vocab_size, seed=7)
    for rid in ("short", "medium", "long"):
        engine.add_request(rid, prompts[rid], GREEDY)
    early: dict[str, list[int]] = {}
    for _ in range(3):  # the long prompt is still being prefilled in chunks here
        for o in engine.step():
            early.setdefault(o.request_id, []).extend(o.token_ids)
    assert early.get("short"), "the short request should be decoding before 'late' arrives"
    assert "long" not in early, "the long prompt should still be in chunked prefill"
    engine.add_request("late", prompts["late"], GREEDY)
    outs = drain(engine)
    for rid, prompt in prompts.items():
        got = early.get(rid, []) + tokens_of(outs.get(rid, []))
        want = hf_greedy(arch, prompt, GREEDY.max_tokens)
        assert got == want, f"{arch}/{rid}: engine {got} != transformers {want}"
    engine.check_idle_invariant()


def test_text_prompt_with_multibyte_characters_matches(make_engine, hf_greedy, drain,
                                                       tokens_of) -> None:
    engine = make_engine("qwen3")
    prompt = engine.tokenizer.encode("你好，世界！😀 café")
    engine.add_request("r", prompt, GREEDY)
    assert tokens_of(drain(engine)["r"]) == hf_greedy("qwen3", prompt, GREEDY.max_tokens)


def test_preemption_by_recompute_keeps_greedy_output(make_engine, drain, tokens_of) -> None:
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 300) for _ in range(rng.randrange(5, 30))] for _ in range(8)]
    sp = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)

    def run(**options: int) -> tuple[dict[str, list[int]], int]:
        engine = make_engine("llama", page_size=4, **options)
        for i, p in enumerate(prompts):
            engine.add_request(str(i), p, sp)
        outs = drain(engine)
        engine.check_idle_invariant()
        return {k: tokens_of(v) for k, v in outs.items()}, engine.stats().preemptions

    roomy, none = run()
    tight, preempted = run(num_pages=20)  # 80 token slots for 8 requests of up to 59 tokens
    assert none == 0 and preempted > 0
    assert tight == roomy
