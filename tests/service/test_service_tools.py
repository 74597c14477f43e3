"""Tool calls end to end against `minisgl launch` with the tiny model: the official OpenAI client
and the gRPC frontend of the same service.

``required`` and named tool_choice are grammar-constrained, so even a random model's arguments
validate against their schema; ``auto`` is left free (the tiny model never writes a call, so it
answers with content), and a history with tool calls and tool results is accepted. At
temperature 0, gRPC answers with the same calls and content as the OpenAI frontend.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import jsonschema
import openai
import pytest
from openai import OpenAI

from minisgl_core.testing.service import RunningService, free_port, launch_service

SERVICE_ARGS = ["--num-pages", "1024", "--page-size", "16"]


def fn(name: str, properties: dict[str, Any], required: list[str] | None = None,
       defs: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": properties,
                              "required": list(properties) if required is None else required}
    if defs:
        params["$defs"] = defs
    return {"type": "function", "function": {"name": name, "description": f"{name} tool",
                                             "parameters": params}}


WEATHER = fn("get_weather", {"city": {"enum": ["Paris", "Tokyo"]},
                             "unit": {"enum": ["c", "f"]}})
ADD = fn("add", {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                 "b": {"type": "integer", "minimum": 0, "maximum": 9}})
MOVE = fn("move", {"to": {"$ref": "#/$defs/Point"}, "fast": {"type": "boolean"}},
          defs={"Point": {"type": "object", "properties": {
              "x": {"type": "integer", "minimum": 0, "maximum": 3},
              "y": {"type": "integer", "minimum": 0, "maximum": 3}}, "required": ["x", "y"]}})
NOTE = fn("note", {"text": {"type": "string", "maxLength": 5}}, required=["text"])
TOOLSETS = [[WEATHER], [WEATHER, ADD], [ADD, MOVE, NOTE]]


def schema_of(tools: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(t["function"]["parameters"] for t in tools if t["function"]["name"] == name)


@pytest.fixture(scope="module")
def long_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny model with a 4096-token context: its tokenizer spends about a token per
    character on the tools prompt."""
    from minisgl_core.testing.tiny import make_tiny_model

    path = make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-long", "llama")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))
    return str(path)


@pytest.fixture(scope="module")
def grpc_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def service(long_tiny_model: str, grpc_port: int, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[RunningService]:
    svc = launch_service(long_tiny_model, transport="zmq", frontend="openai,grpc",
                         args=[*SERVICE_ARGS, "--grpc-port", str(grpc_port)],
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def client(service: RunningService) -> OpenAI:
    return OpenAI(base_url=f"{service.url}/v1", api_key="none", max_retries=0)


USER = [{"role": "user", "content": "What now?"}]
HISTORY = [*USER, {"role": "assistant", "content": None, "tool_calls": [{
    "id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]


@pytest.mark.parametrize("tools", TOOLSETS, ids=["one", "two", "refs"])
def test_required_calls_validate(client: OpenAI, service: RunningService,
                                 tools: list[dict[str, Any]]) -> None:
    done = client.chat.completions.create(
        model=service.model_name(), messages=USER, tools=tools, tool_choice="required",
        max_tokens=200, temperature=1.0, seed=5, n=2, parallel_tool_calls=False)
    for choice in done.choices:
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert len(calls) == 1  # parallel_tool_calls=False: exactly one
        for call in calls:
            assert call.type == "function" and call.id.startswith("call_")
            jsonschema.validate(json.loads(call.function.arguments),
                                schema_of(tools, call.function.name))


def test_named_function_streams_like_openai(client: OpenAI, service: RunningService) -> None:
    tools = [WEATHER, MOVE]
    stream = client.chat.completions.create(
        model=service.model_name(), messages=USER, tools=tools, max_tokens=200,
        tool_choice={"type": "function", "function": {"name": "move"}}, stream=True)
    deltas = [c.choices[0] for c in stream if c.choices]
    calls = [d.delta.tool_calls[0] for d in deltas if d.delta.tool_calls]
    assert calls[0].id and calls[0].function.name == "move" and calls[0].function.arguments == ""
    assert all(c.index == 0 and c.id is None and c.function.name is None for c in calls[1:])
    arguments = "".join(c.function.arguments for c in calls[1:])
    jsonschema.validate(json.loads(arguments), schema_of(tools, "move"))
    assert deltas[-1].finish_reason == "tool_calls"
    full = client.chat.completions.create(
        model=service.model_name(), messages=USER, tools=tools, max_tokens=200,
        tool_choice={"type": "function", "function": {"name": "move"}}, temperature=0)
    (call,) = full.choices[0].message.tool_calls or []
    assert call.function.name == "move" and full.choices[0].message.content is None
    jsonschema.validate(json.loads(call.function.arguments), schema_of(tools, "move"))


def test_auto_without_a_call_is_content_and_history_is_accepted(
        client: OpenAI, service: RunningService) -> None:
    history = HISTORY
    done = client.chat.completions.create(model=service.model_name(), messages=history,
                                          tools=[WEATHER], max_tokens=8, temperature=0)
    choice = done.choices[0]
    assert choice.finish_reason in ("stop", "length") and not choice.message.tool_calls
    assert isinstance(choice.message.content, str)
    tokens = httpx.post(f"{service.url}/tokenize", json={
        "messages": history, "tools": [WEATHER], "return_token_strs": True}).json()
    text = "".join(tokens["token_strs"]).replace("Ġ", " ").replace("Ċ", "\n")
    assert "<tool_response>" in text and "get_weather" in text and "<tools>" in text


def test_unknown_function_is_400_and_idle(client: OpenAI, service: RunningService) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=service.model_name(), messages=USER, tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "launch_rockets"}})
    assert "launch_rockets" in err.value.message
    m = service.wait_metrics(lambda m: m.get("minisgl_requests_running") == 0,
                             what="no request running")
    assert m.get("minisgl_frontend_requests_inflight") == 0


def _idle(m: dict[str, float]) -> bool:
    return (m["minisgl_kv_pages_free"] == m["minisgl_kv_pages_total"]
            and m["minisgl_requests_running"] == 0 and m["minisgl_requests_waiting"] == 0)


def grpc_chat(port: int, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              choice: Any = None, *, max_tokens: int, parallel_tool_calls: bool | None = None
              ) -> tuple[str, str, list[Any], int]:
    """Text, finish reason, tool calls and prompt tokens of one gRPC Generate at temperature 0."""
    from minisgl_frontend_grpc.client import pb2, stream_generate

    request = pb2.GenerateRequest(
        messages=[pb2.ChatMessage(
            role=m["role"], content=m["content"] or "", tool_call_id=m.get("tool_call_id", ""),
            tool_calls=[pb2.ToolCall(id=c["id"], name=c["function"]["name"],
                                     arguments=c["function"]["arguments"])
                        for c in m.get("tool_calls", [])]) for m in messages],
        tools=[pb2.Tool(name=t["function"]["name"], description=t["function"]["description"],
                        parameters=json.dumps(t["function"]["parameters"])) for t in tools],
        sampling=pb2.SamplingParams(temperature=0.0, max_tokens=max_tokens))
    if choice is not None:
        request.tool_choice.CopyFrom(choice)
    if parallel_tool_calls is not None:
        request.parallel_tool_calls = parallel_tool_calls
    replies = list(stream_generate(f"127.0.0.1:{port}", request, timeout=120))
    assert not any(r.tool_calls for r in replies[:-1])  # calls come whole, at the end
    last = replies[-1]
    return ("".join(r.text for r in replies), last.finish_reason, list(last.tool_calls),
            last.usage.prompt_tokens)


def test_grpc_tool_calls_equal_the_openai_ones(client: OpenAI, service: RunningService,
                                               grpc_port: int) -> None:
    from minisgl_frontend_grpc.client import pb2

    tools = [WEATHER, MOVE]
    for openai_choice, grpc_choice, extra in (
            ("required", pb2.ToolChoice(mode="required"), {"parallel_tool_calls": False}),
            ({"type": "function", "function": {"name": "move"}},
             pb2.ToolChoice(function="move"), {})):
        done = client.chat.completions.create(
            model=service.model_name(), messages=USER, tools=tools, tool_choice=openai_choice,
            max_tokens=200, temperature=0, **extra)
        want = done.choices[0]
        text, reason, calls, prompt_tokens = grpc_chat(
            grpc_port, USER, tools, grpc_choice, max_tokens=200, **extra)
        assert (text, reason) == ("", want.finish_reason) and reason == "tool_calls"
        assert prompt_tokens == done.usage.prompt_tokens  # the same prompt
        assert [(c.name, c.arguments) for c in calls] == [
            (c.function.name, c.function.arguments) for c in want.message.tool_calls or []]
        assert all(c.id.startswith("call_") for c in calls)
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), schema_of(tools, call.name))


def test_grpc_history_with_tool_turns_equals_openai(client: OpenAI, service: RunningService,
                                                    grpc_port: int) -> None:
    done = client.chat.completions.create(model=service.model_name(), messages=HISTORY,
                                          tools=[WEATHER], max_tokens=8, temperature=0)
    want = done.choices[0]
    text, reason, calls, prompt_tokens = grpc_chat(grpc_port, HISTORY, [WEATHER], max_tokens=8)
    assert (text, reason, calls) == (want.message.content, want.finish_reason, [])
    assert prompt_tokens == done.usage.prompt_tokens


def test_grpc_bad_tools_are_invalid_argument_and_idle(service: RunningService,
                                                      grpc_port: int) -> None:
    from minisgl_frontend_grpc.client import pb2

    bad_schema = fn("f", {"a": {"type": "nope"}})
    for tools, choice, says in (
            ([WEATHER], pb2.ToolChoice(function="launch_rockets"), "launch_rockets"),
            ([WEATHER], pb2.ToolChoice(mode="sometimes"), "tool_choice.mode"),
            ([fn("no spaces", {})], None, "1-64 letters"),
            ([WEATHER, WEATHER], None, "used twice"),
            ([bad_schema], pb2.ToolChoice(mode="required"), "nope")):  # refused by the engine
        with pytest.raises(grpc.RpcError) as err:
            grpc_chat(grpc_port, USER, tools, choice, max_tokens=8)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert says in (err.value.details() or "")
    from minisgl_frontend_grpc.client import stream_generate

    not_json = pb2.GenerateRequest(messages=[pb2.ChatMessage(role="user", content="x")],
                                   tools=[pb2.Tool(name="f", parameters="{oops")])
    with pytest.raises(grpc.RpcError) as err:
        list(stream_generate(f"127.0.0.1:{grpc_port}", not_json, timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tools[0].parameters is not valid JSON" in (err.value.details() or "")
    assert _idle(service.wait_metrics(_idle, what="the service idle"))
