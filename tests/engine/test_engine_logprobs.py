"""Logprobs: each generated token's log-probability and the top alternatives, equal to
transformers' log-softmax of the same logits, whatever else the sampler does to them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from minisgl_core import LLM, SamplingParams

PROMPT = [5, 6, 7, 8, 9, 10]


@pytest.fixture(scope="module")
def llm(tiny_models: dict[str, Path]) -> LLM:
    return LLM(str(tiny_models["llama"]), page_size=4, num_threads=1)


def _reference(tiny_models: dict[str, Path], tokens: list[int]) -> torch.Tensor:
    """transformers' log-softmax at every generated position: [len(tokens), V]."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_models["llama"], dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = hf(torch.tensor([PROMPT + tokens])).logits[0, len(PROMPT) - 1:-1]
    return torch.log_softmax(logits.float(), -1)


def test_greedy_logprobs_match_transformers(llm: LLM, tiny_models: dict[str, Path]) -> None:
    (out,) = llm.generate(PROMPT, SamplingParams(max_tokens=6, temperature=0.0,
                                                 ignore_eos=True, logprobs=3))
    assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids) == 6
    ref = _reference(tiny_models, out.token_ids)
    for pos, (tok, lp) in enumerate(zip(out.token_ids, out.logprobs, strict=True)):
        assert lp.logprob == pytest.approx(ref[pos, tok].item(), abs=1e-4)
        assert [t for t, _ in lp.top] == ref[pos].topk(3).indices.tolist()
        assert lp.top[0] == (tok, pytest.approx(lp.logprob))  # greedy took the most likely
        assert all(a >= b for (_, a), (_, b) in zip(lp.top, lp.top[1:], strict=False))


def test_logprobs_are_the_model_s_when_sampling_is_steered(
        llm: LLM, tiny_models: dict[str, Path]) -> None:
    plain = llm.generate(PROMPT, SamplingParams(max_tokens=1, temperature=0.0, logprobs=0))[0]
    forced_tok = (plain.token_ids[0] + 1) % 50
    (out,) = llm.generate(PROMPT, SamplingParams(
        max_tokens=4, temperature=0.7, seed=3, ignore_eos=True, logprobs=0,
        logit_bias=((forced_tok, 100.0),), presence_penalty=1.0))
    assert out.token_ids == [forced_tok] * 4
    assert out.logprobs is not None and all(lp.top == () for lp in out.logprobs)
    ref = _reference(tiny_models, out.token_ids)  # the bias and penalty do not show
    assert [lp.logprob for lp in out.logprobs] == pytest.approx(
        [ref[i, forced_tok].item() for i in range(4)], abs=1e-4)
    assert out.logprobs[0].logprob < plain.logprobs[0].logprob <= 0  # type: ignore[index]


def test_no_logprobs_unless_asked_and_mixed_batches(llm: LLM) -> None:
    outs = llm.generate([PROMPT, PROMPT], [
        SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True, logprobs=20)])
    assert outs[0].logprobs is None and outs[0].token_ids == outs[1].token_ids
    assert outs[1].logprobs is not None
    assert all(len(lp.top) == 20 and math.isfinite(lp.logprob) for lp in outs[1].logprobs)
    with pytest.raises(ValueError, match=r"logprobs must be in \[0, 20\]"):
        SamplingParams(logprobs=21)
