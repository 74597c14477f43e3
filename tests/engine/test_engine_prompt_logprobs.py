"""Prompt logprobs: one entry per prompt token (None for the first), equal to transformers'
log-softmax at each position, through chunked prefill, the prefix cache and preemption."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minisgl_core import LLM, SamplingParams
from minisgl_core.wire.schema import TokenLogprob

PROMPT = [3, 17, 5, 42, 9, 11, 28, 7, 33, 2, 19, 8, 40]


@pytest.fixture(scope="module")
def reference(tiny_models: dict[str, Path]) -> torch.Tensor:
    """transformers' log-softmax at each prompt position: row p predicts token p + 1."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_models["llama"], dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = hf(torch.tensor([PROMPT])).logits[0]
    return torch.log_softmax(logits.float(), -1)


def _check(entries: list[TokenLogprob | None] | None, ref: torch.Tensor, k: int) -> None:
    assert entries is not None and len(entries) == len(PROMPT)
    assert entries[0] is None
    for p, entry in enumerate(entries[1:]):
        assert entry is not None
        assert entry.logprob == pytest.approx(ref[p, PROMPT[p + 1]].item(), abs=1e-4)
        assert [t for t, _ in entry.top] == ref[p].topk(k).indices.tolist()
        assert [v for _, v in entry.top] == pytest.approx(ref[p].topk(k).values.tolist(),
                                                          abs=1e-4)


@pytest.mark.parametrize("chunk", [512, 4])
def test_prompt_logprobs_match_transformers(tiny_models: dict[str, Path], reference: torch.Tensor,
                                            chunk: int) -> None:
    llm = LLM(str(tiny_models["llama"]), page_size=4, num_threads=1, max_prefill_tokens=chunk)
    (out,) = llm.generate(PROMPT, SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True,
                                                 prompt_logprobs=3))
    _check(out.prompt_logprobs, reference, 3)
    assert out.logprobs is None  # generated-token logprobs are a separate request


def test_prefix_cache_is_bypassed_only_while_entries_are_missing(
        tiny_models: dict[str, Path], reference: torch.Tensor) -> None:
    llm = LLM(str(tiny_models["llama"]), page_size=4, num_threads=1, cache="radix")
    greedy = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    llm.generate(PROMPT, greedy)  # fills the cache with the prompt's full pages
    hits = llm.engine.stats().cache_hit_tokens
    (out,) = llm.generate(PROMPT, SamplingParams(max_tokens=1, temperature=0.0,
                                                 prompt_logprobs=0))
    _check(out.prompt_logprobs, reference, 0)
    assert llm.engine.stats().cache_hit_tokens == hits  # computed, not taken from the cache
    (plain,) = llm.generate(PROMPT, greedy)
    assert plain.prompt_logprobs is None
    assert llm.engine.stats().cache_hit_tokens > hits  # others still hit the cache
    llm.engine.check_idle_invariant()


def test_preempted_requests_report_each_entry_once(tiny_models: dict[str, Path],
                                                   reference: torch.Tensor) -> None:
    # 6 pages of 4 tokens cannot hold four 13-token prompts growing by 8: some are preempted
    llm = LLM(str(tiny_models["llama"]), page_size=4, num_pages=8, num_threads=1,
              max_prefill_tokens=6)
    outs = llm.generate([PROMPT] * 4, SamplingParams(max_tokens=8, temperature=0.0,
                                                     ignore_eos=True, prompt_logprobs=2))
    assert llm.engine.stats().preemptions > 0
    for out in outs:
        _check(out.prompt_logprobs, reference, 2)
    assert len({tuple(o.token_ids) for o in outs}) == 1
    llm.engine.check_idle_invariant()


def test_mixed_batch_and_bounds(tiny_models: dict[str, Path], reference: torch.Tensor) -> None:
    llm = LLM(str(tiny_models["llama"]), page_size=4, num_threads=1)
    outs = llm.generate([PROMPT, PROMPT[:1], PROMPT], [
        SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=20),
        SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True, prompt_logprobs=20)])
    assert outs[0].prompt_logprobs is None
    assert outs[1].prompt_logprobs == [None]  # a one-token prompt has nothing to score
    _check(outs[2].prompt_logprobs, reference, 20)
    assert outs[0].token_ids == outs[2].token_ids
    for bad in (-1, 21):
        with pytest.raises(ValueError, match=r"prompt_logprobs must be in \[0, 20\]"):
            SamplingParams(prompt_logprobs=bad)
