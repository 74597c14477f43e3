"""Tools in the prompt and the tool-call answer shapes (whole and streamed), scripted model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from openai import OpenAI

from minisgl_core.text.chat_tools import conversation
from minisgl_core.wire.schema import ChatMessage, GenerateRequest, TextDelta, ToolCall

FUNCS = {"get_weather", "add"}
AUTO_TEXT = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": '
             '"Par\\"is <tool_call>"}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": '
             '{"a": 1, "b": 2}}\n</tool_call>')


def test_conversation_uses_the_template_or_the_fallback() -> None:
    tools = json.dumps([{"type": "function", "function": {"name": "f", "parameters": {}}}])
    history = (ChatMessage("user", "hi"),
               ChatMessage("assistant", "", (ToolCall("c1", "f", '{"x": 1}'),)),
               ChatMessage("tool", "42", tool_call_id="c1"))
    native, passed = conversation(history, tools, "{% for t in tools %}{% endfor %}")
    assert passed == json.loads(tools)
    assert native[1]["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}
    assert native[2] == {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}
    plain, passed = conversation(history, tools, "{{ messages }}")
    assert passed is None
    assert plain[0]["role"] == "system" and "<tools>" in plain[0]["content"]
    assert plain[2]["content"] == '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    assert plain[3] == {"role": "user", "content": "<tool_response>\n42\n</tool_response>"}
    untouched, _ = conversation((ChatMessage("user", "hi"),), None, "{{ messages }}")
    assert untouched == [{"role": "user", "content": "hi"}]


class ToolScript:
    """Wraps the scripted engine: a prompt with [tool] answers AUTO_TEXT, 3 characters a delta."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    async def generate(self, request: GenerateRequest) -> Any:
        if "[tool]" not in (request.messages or (ChatMessage("user", ""),))[-1].content:
            async for delta in self.base.generate(request):
                yield delta
            return
        pieces = [AUTO_TEXT[i:i + 3] for i in range(0, len(AUTO_TEXT), 3)]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            yield TextDelta(request_id=request.request_id, text=piece, token_ids=(i,),
                            completion_tokens=i + 1, prompt_tokens=5,
                            finish_reason="stop" if last else None)


@pytest.fixture(scope="module")
def tool_server(kit: SimpleNamespace) -> Iterator[Any]:
    running = kit.RunningServer(ToolScript(kit.ScriptedEngineClient()))
    yield running
    running.stop()


TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in sorted(FUNCS)]


def test_auto_answer_whole_and_streamed(tool_server: Any) -> None:
    client = OpenAI(base_url=tool_server.url, api_key="x", max_retries=0)
    kwargs: dict[str, Any] = {"model": "scripted-model", "tools": TOOLS,
                              "messages": [{"role": "user", "content": "[tool] go"}]}
    whole = client.chat.completions.create(**kwargs).choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content == "Let me check."
    calls = whole.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather", "add"]
    chunks = [c.choices[0] for c in client.chat.completions.create(**kwargs, stream=True)
              if c.choices]
    text = "".join(c.delta.content or "" for c in chunks)
    assert text == "Let me check."
    streamed: list[dict[str, str]] = []
    for c in chunks:
        for d in c.delta.tool_calls or []:
            if d.id is not None:  # a new call: index, id, type and name come first
                assert d.index == len(streamed) and d.type == "function"
                streamed.append({"id": d.id, "name": d.function.name, "arguments": ""})
                assert d.function.arguments == ""
            else:
                streamed[d.index]["arguments"] += d.function.arguments
    assert [(s["name"], json.loads(s["arguments"])) for s in streamed] == [
        (c.function.name, json.loads(c.function.arguments)) for c in calls]
    assert chunks[-1].finish_reason == "tool_calls"
    plain = client.chat.completions.create(**{**kwargs, "tool_choice": "none"}).choices[0]
    assert plain.finish_reason == "stop" and plain.message.content == AUTO_TEXT
    free = client.chat.completions.create(
        **{**kwargs, "messages": [{"role": "user", "content": "hello"}]}).choices[0]
    assert free.finish_reason == "stop" and not free.message.tool_calls
