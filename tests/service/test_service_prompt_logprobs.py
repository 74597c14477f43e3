"""Prompt logprobs through every process: completions' ``echo`` (what log-likelihood evaluations
read), vLLM's ``prompt_logprobs`` on completions and chat, streamed and not, and bad asks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch

from minisgl_core.testing.service import RunningService, launch_service

ARGS = ["--dtype", "float32", "--max-seq-len-override", "512", "--num-pages", "256",
        "--page-size", "16"]
PROMPT = [3, 17, 5, 42, 9, 11, 28, 7, 33, 2]


@pytest.fixture(scope="module")
def svc(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    service = launch_service(tiny_model, args=ARGS,
                             log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield service
    finally:
        service.stop()
        assert not service.leftover_workers()


@pytest.fixture(scope="module")
def reference(tiny_model: str) -> torch.Tensor:
    """transformers' log-softmax at each prompt position: row p predicts token p + 1."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    with torch.inference_mode():
        return torch.log_softmax(hf(torch.tensor([PROMPT])).logits[0].float(), -1)


def _post(svc: RunningService, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{svc.url}/v1/{path}", json={"model": svc.model_name(), **body},
                      timeout=60)


def _stream(svc: RunningService, body: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = []
    with httpx.stream("POST", f"{svc.url}/v1/completions", timeout=60,
                      json={"model": svc.model_name(), "stream": True, **body}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def test_echo_scores_the_prompt_as_transformers_does(svc: RunningService,
                                                     reference: torch.Tensor) -> None:
    body = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 2, "temperature": 0}
    resp = _post(svc, "completions", body)
    assert resp.status_code == 200, resp.text
    (choice,) = resp.json()["choices"]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(PROMPT) and choice["finish_reason"] == "length"
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    want = [reference[p, PROMPT[p + 1]].item() for p in range(len(PROMPT) - 1)]
    assert lp["token_logprobs"][1:] == pytest.approx(want, abs=1e-4)
    for p, top in enumerate(lp["top_logprobs"][1:]):
        # keyed by text: alternatives that decode alike share a key, so compare as values
        best = reference[p].topk(2).values.tolist()
        assert top and all(v == pytest.approx(best[0], abs=1e-4)
                           or v == pytest.approx(best[1], abs=1e-4) for v in top.values())
    assert choice["text"] == "".join(lp["tokens"])  # token ids: the decoded prompt
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i])
                                 for i in range(len(PROMPT))]
    assert resp.json()["usage"]["completion_tokens"] == 0
    # the same prompt again: the prefix cache must not take positions whose logprobs are due
    again = _post(svc, "completions", body).json()["choices"][0]["logprobs"]["token_logprobs"]
    assert again[1:] == pytest.approx(want, abs=1e-4)


def test_lm_eval_loglikelihood_request(svc: RunningService, reference: torch.Tensor) -> None:
    """lm-evaluation-harness' local-completions: a batch of token-id prompts, max_tokens 1,
    logprobs 1, echo; it reads token_logprobs[ctxlen:-1] and greediness from top_logprobs."""
    prompts, ctxlen = [PROMPT, PROMPT[:7]], 4
    resp = _post(svc, "completions", {"prompt": prompts, "temperature": 0, "max_tokens": 1,
                                      "logprobs": 1, "seed": 1234, "echo": True})
    assert resp.status_code == 200, resp.text
    choices = sorted(resp.json()["choices"], key=lambda c: c["index"])
    for prompt, choice in zip(prompts, choices, strict=True):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(prompt) + 1  # the prompt, then 1 generated
        scored = lp["token_logprobs"][ctxlen:-1]
        want = [reference[p - 1, prompt[p]].item() for p in range(ctxlen, len(prompt))]
        assert sum(scored) == pytest.approx(sum(want), abs=1e-3)
        greedy = all(t == max(top.values())
                     for t, top in zip(scored, lp["top_logprobs"][ctxlen:-1], strict=True))
        assert greedy == all(int(reference[p - 1].argmax()) == prompt[p]
                             for p in range(ctxlen, len(prompt)))


def test_echo_with_generation_streamed_and_not(svc: RunningService) -> None:
    body = {"prompt": "hello world", "max_tokens": 3, "echo": True, "logprobs": 1,
            "temperature": 0, "ignore_eos": True}
    full = _post(svc, "completions", body).json()["choices"][0]
    plain = _post(svc, "completions", {**body, "echo": False}).json()["choices"][0]
    assert full["text"] == "hello world" + plain["text"]
    bare = _post(svc, "completions", {**body, "logprobs": None}).json()["choices"][0]
    assert bare["text"] == full["text"] and bare["logprobs"] is None
    lp = full["logprobs"]
    n_prompt = len(lp["tokens"]) - 3
    assert n_prompt >= 1 and lp["token_logprobs"][0] is None
    assert lp["tokens"][n_prompt:] == plain["logprobs"]["tokens"]
    assert lp["token_logprobs"][n_prompt:] == pytest.approx(
        plain["logprobs"]["token_logprobs"], abs=1e-4)
    assert lp["text_offset"] == sorted(lp["text_offset"])
    chunks = _stream(svc, body)
    choices = [c["choices"][0] for c in chunks]
    assert "".join(c["text"] for c in choices) == full["text"]
    assert choices[0]["text"] == "hello world"  # the echo comes first, in its own chunk
    streamed = [c["logprobs"] for c in choices if c["logprobs"]]
    for key in ("tokens", "text_offset"):
        assert [v for part in streamed for v in part[key]] == lp[key]
    values = [v for part in streamed for v in part["token_logprobs"]]
    assert values[0] is None and values[1:] == pytest.approx(lp["token_logprobs"][1:], abs=1e-4)


def test_echo_only_streamed(svc: RunningService) -> None:
    chunks = _stream(svc, {"prompt": PROMPT, "max_tokens": 0, "echo": True, "n": 2,
                           "stream_options": {"include_usage": True}})
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for c in chunks[:-1]:
        (choice,) = c["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        if choice["finish_reason"]:
            reasons[choice["index"]] = choice["finish_reason"]
    assert reasons == {0: "length", 1: "length"} and texts[0] == texts[1] != ""
    assert chunks[-1]["usage"]["completion_tokens"] == 0


def test_vllm_prompt_logprobs_on_completions_and_chat(svc: RunningService,
                                                      reference: torch.Tensor) -> None:
    resp = _post(svc, "completions", {"prompt": PROMPT, "max_tokens": 2, "prompt_logprobs": 3})
    (choice,) = resp.json()["choices"]
    entries = choice["prompt_logprobs"]
    assert len(entries) == len(PROMPT) and entries[0] is None
    for p, entry in enumerate(entries[1:]):
        actual = entry[str(PROMPT[p + 1])]
        assert actual["logprob"] == pytest.approx(reference[p, PROMPT[p + 1]].item(), abs=1e-4)
        assert actual["rank"] == int((reference[p] > reference[p, PROMPT[p + 1]]).sum()) + 1
        top = reference[p].topk(3).indices.tolist()
        assert [entry[str(t)]["rank"] for t in top] == [1, 2, 3]
    assert "logprobs" not in choice or choice["logprobs"] is None
    chat = _post(svc, "chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                           "max_tokens": 2, "prompt_logprobs": 0}).json()
    prompt_tokens = chat["usage"]["prompt_tokens"]
    assert len(chat["prompt_logprobs"]) == prompt_tokens and chat["prompt_logprobs"][0] is None
    assert all(len(e) == 1 for e in chat["prompt_logprobs"][1:])


BAD = [
    ("completions", {"prompt": "a", "prompt_logprobs": -1}, "prompt_logprobs"),
    ("completions", {"prompt": "a", "prompt_logprobs": 21}, "prompt_logprobs"),
    ("completions", {"prompt": "a", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ("completions", {"prompt": "a", "echo": True, "logprobs": 21}, "logprobs"),
    ("completions", {"prompt": "a", "echo": "yes"}, "echo"),
    ("completions", {"prompt": "a", "max_tokens": 0}, "max_tokens"),
    ("chat/completions", {"messages": [{"role": "user", "content": "a"}], "echo": True}, "echo"),
    ("chat/completions", {"messages": [{"role": "user", "content": "a"}],
                          "prompt_logprobs": 2, "stream": True}, "prompt_logprobs"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD, ids=[str(b) for _, b, _ in BAD])
def test_bad_prompt_logprobs_and_echo_are_400(svc: RunningService, path: str,
                                              body: dict[str, Any], param: str) -> None:
    resp = _post(svc, path, body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
