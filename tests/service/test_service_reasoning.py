"""--reasoning-parser end to end: the synthetic scheduler echoes the prompt, so a chat whose
rendered prompt is ``<think>a</think>b`` comes back through the real tokenizer, detokenizer and
frontends, over OpenAI (streamed and not, with tools and response_format) and gRPC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from minisgl_core.testing.service import RunningService, free_port, launch_service
from minisgl_core.testing.tiny import make_tiny_model

# the template writes the last message alone, then EOS: the echo is that message, whole
ECHO_TEMPLATE = "{{ messages[-1]['content'] }}<|im_end|>"
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningService, str]]:
    model = make_tiny_model(tmp_path_factory.mktemp("echo") / "tiny-echo", "llama",
                            chat_template=ECHO_TEMPLATE)
    grpc_port = free_port()
    svc = launch_service(str(model), frontend="openai,grpc", log_dir=tmp_path_factory.mktemp("l"),
                         args=["--scheduler", "synthetic", "--reasoning-parser", "qwen3",
                               "--max-seq-len-override", "512", "--grpc-port", str(grpc_port)])
    try:
        yield svc, f"127.0.0.1:{grpc_port}"
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def ask(svc: RunningService, content: str, **extra: object) -> dict[str, object]:
    body = {"model": svc.model_name(), "max_tokens": 200,
            "messages": [{"role": "user", "content": content}], **extra}
    r = httpx.post(f"{svc.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]  # type: ignore[no-any-return]


def ask_streamed(svc: RunningService, content: str, **extra: object
                 ) -> tuple[str, str, list[dict[str, object]]]:
    client = OpenAI(base_url=f"{svc.url}/v1", api_key="none")
    reasoning, text, calls = [], [], []
    for chunk in client.chat.completions.create(
            model=svc.model_name(), max_tokens=200, stream=True,
            messages=[{"role": "user", "content": content}], **extra):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning.append(getattr(delta, "reasoning_content", None) or "")
        text.append(delta.content or "")
        calls += [c.model_dump() for c in delta.tool_calls or ()]
    return "".join(reasoning), "".join(text), calls


def test_the_think_block_becomes_reasoning_content(service: tuple[RunningService, str]) -> None:
    svc, _ = service
    choice = ask(svc, "<think>a</think>b")
    assert choice["message"] == {"role": "assistant", "content": "b", "reasoning_content": "a"}
    assert ask_streamed(svc, "<think>a</think>b")[:2] == ("a", "b")
    long = "<think>\nfirst, 你好 😀 then</think>\n\nthe answer"
    assert ask_streamed(svc, long)[:2] == ("first, 你好 😀 then", "the answer")
    assert ask(svc, "no reasoning here")["message"] == {"role": "assistant",
                                                        "content": "no reasoning here"}
    completion = httpx.post(f"{svc.url}/v1/completions", timeout=60, json={
        "model": svc.model_name(), "prompt": "<think>a</think>b", "max_tokens": 40}).json()
    assert completion["choices"][0]["text"].startswith("<think>a</think>b")  # never split


def test_tool_calls_are_parsed_from_the_content_only(service: tuple[RunningService, str]) -> None:
    svc, _ = service
    choice = ask(svc, f"<think>I should call it</think>{CALL}", tools=WEATHER)
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["reasoning_content"] == "I should call it"  # type: ignore[index]
    call = message["tool_calls"][0]["function"]  # type: ignore[index]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    # a call written inside the reasoning is not a call
    thought = ask(svc, f"<think>maybe {CALL}</think>no call", tools=WEATHER)
    assert thought["finish_reason"] == "stop"
    assert thought["message"]["content"] == "no call"  # type: ignore[index]
    assert "tool_calls" not in thought["message"]  # type: ignore[operator]
    reasoning, text, calls = ask_streamed(svc, f"<think>plan</think>{CALL}", tools=WEATHER)
    assert (reasoning, text) == ("plan", "")
    assert calls[0]["function"]["name"] == "get_weather"


def test_structured_outputs_read_the_content(service: tuple[RunningService, str]) -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str

    svc, _ = service
    client = OpenAI(base_url=f"{svc.url}/v1", api_key="none")
    done = client.chat.completions.parse(
        model=svc.model_name(), max_tokens=200, response_format=City,
        messages=[{"role": "user", "content": '<think>Lyon, surely</think>{"name": "Lyon"}'}])
    message = done.choices[0].message
    assert message.parsed == City(name="Lyon")
    assert getattr(message, "reasoning_content", None) == "Lyon, surely"


def test_chat_template_kwargs_reach_the_template_and_tokenize(
        service: tuple[RunningService, str]) -> None:
    svc, _ = service
    body = {"messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": False}}
    r = httpx.post(f"{svc.url}/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    bad = httpx.post(f"{svc.url}/v1/chat/completions", timeout=30, json={
        "model": svc.model_name(), **body, "chat_template_kwargs": {"tools": []}})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "chat_template_kwargs"


def test_grpc_gets_the_same_fields(service: tuple[RunningService, str]) -> None:
    from minisgl_frontend_grpc.client import pb2, stream_generate

    _, url = service
    request = pb2.GenerateRequest(messages=[pb2.ChatMessage(role="user",
                                                            content="<think>a</think>b")],
                                  sampling=pb2.SamplingParams(max_tokens=50),
                                  chat_template_kwargs='{"enable_thinking": true}')
    msgs = list(stream_generate(url, request, timeout=60))
    assert "".join(m.reasoning_content for m in msgs) == "a"
    assert "".join(m.text for m in msgs) == "b"
    tools = pb2.GenerateRequest(messages=[pb2.ChatMessage(role="user",
                                                          content=f"<think>x</think>{CALL}")],
                                sampling=pb2.SamplingParams(max_tokens=200),
                                tools=[pb2.Tool(name="get_weather", parameters=json.dumps(
                                    WEATHER[0]["function"]["parameters"]))])
    final = list(stream_generate(url, tools, timeout=60))[-1]
    assert final.finish_reason == "tool_calls" and final.tool_calls[0].name == "get_weather"


def test_without_a_parser_the_text_is_as_before(tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path / "tiny-echo", "llama", chat_template=ECHO_TEMPLATE)
    svc = launch_service(str(model), log_dir=tmp_path,
                         args=["--scheduler", "synthetic", "--max-seq-len-override", "512"])
    try:
        assert ask(svc, "<think>a</think>b")["message"] == {"role": "assistant",
                                                            "content": "<think>a</think>b"}
    finally:
        svc.stop()
