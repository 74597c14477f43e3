"""Tool calls end to end against `minisgl launch` with the tiny model and the official client.

``required`` and named tool_choice are grammar-constrained, so even a random model's arguments
validate against their schema; ``auto`` is left free (the tiny model never writes a call, so it
answers with content), and a history with tool calls and tool results is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai import OpenAI

from minisgl_core.testing.service import RunningService, launch_service

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
def service(long_tiny_model: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[RunningService]:
    svc = launch_service(long_tiny_model, transport="zmq", args=SERVICE_ARGS,
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def client(service: RunningService) -> OpenAI:
    return OpenAI(base_url=f"{service.url}/v1", api_key="none", max_retries=0)


USER = [{"role": "user", "content": "What now?"}]


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
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]
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
    m = service.wait_metrics(lambda m: m.get("minisgl_requests_running") == 0, 2.0)
    assert m.get("minisgl_frontend_requests_inflight") == 0
