"""Tools over a real gRPC server with a scripted engine: what reaches the engine, what streams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from minisgl_frontend_grpc.codegen import load_stubs

from minisgl_core.wire.schema import GenerateRequest, TextDelta, ToolCall

pb2, pb2_grpc = load_stubs()

ANSWER = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
          '\n</tool_call>')
PIECES = len(range(0, len(ANSWER), 4))  # deltas, one token id each
PARAMETERS = '{"type": "object", "properties": {"city": {"type": "string"}}}'


class ToolEngine:
    """The scripted engine, but a request with tools gets ANSWER, 4 characters (an id) a delta."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        if request.tools is None:
            async for delta in self.base.generate(request):
                yield delta
            return
        self.base.requests.append(request)
        pieces = [ANSWER[i:i + 4] for i in range(0, len(ANSWER), 4)]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            yield TextDelta(request.request_id, piece, (i,), finish_reason="stop" if last else None,
                            prompt_tokens=3, completion_tokens=i + 1)


@pytest.fixture
def engine(engine: Any) -> ToolEngine:
    return ToolEngine(engine)


def test_auto_streams_content_and_ends_with_the_calls(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        history = [pb2.ChatMessage(role="user", content="Weather?"),
                   pb2.ChatMessage(role="assistant", tool_calls=[
                       pb2.ToolCall(id="call_1", name="get_weather")]),
                   pb2.ChatMessage(role="tool", content="18 C", tool_call_id="call_1")]
        request = pb2.GenerateRequest(messages=history, tools=[pb2.Tool(
            name="get_weather", description="the weather", parameters=PARAMETERS)])
        replies = [r async for r in pb2_grpc.GeneratorStub(channel).Generate(request)]
        assert "".join(r.text for r in replies) == "Let me check."
        assert "<" not in "".join(r.text for r in replies)  # a call in the making is held back
        assert [i for r in replies for i in r.token_ids] == list(range(PIECES))
        assert not any(r.tool_calls for r in replies[:-1])
        (call,) = replies[-1].tool_calls
        assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
        assert call.id.startswith("call_") and replies[-1].finish_reason == "tool_calls"

        (seen,) = engine.requests
        assert json.loads(seen.tools) == [{"type": "function", "function": {
            "name": "get_weather", "description": "the weather",
            "parameters": json.loads(PARAMETERS)}}]
        assert seen.messages[1].tool_calls == (ToolCall("call_1", "get_weather", "{}"),)
        assert (seen.messages[2].role, seen.messages[2].tool_call_id) == ("tool", "call_1")
        assert seen.sampling.structured is None  # auto: free text

    run_server(scenario)


def test_named_and_none_choices(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = pb2_grpc.GeneratorStub(channel)
        messages = [pb2.ChatMessage(role="user", content="hi")]
        tools = [pb2.Tool(name="get_weather", parameters=PARAMETERS)]
        named = pb2.GenerateRequest(messages=messages, tools=tools,
                                    tool_choice=pb2.ToolChoice(function="get_weather"))
        called = [r async for r in stub.Generate(named)][-1]
        assert called.finish_reason == "tool_calls" and called.tool_calls[0].name == "get_weather"
        none = pb2.GenerateRequest(messages=messages, tools=tools,
                                   tool_choice=pb2.ToolChoice(mode="none"))
        replies = [r async for r in stub.Generate(none)]
        assert "".join(r.text for r in replies) == ANSWER  # not parsed
        assert replies[-1].finish_reason == "stop" and not replies[-1].tool_calls
        first, second = engine.requests
        assert first.sampling.structured is not None
        assert json.loads(first.sampling.structured.spec) == json.loads(PARAMETERS)
        assert second.sampling.structured is None and second.tools is not None

    run_server(scenario)
