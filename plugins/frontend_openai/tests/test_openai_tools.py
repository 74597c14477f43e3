"""Tool-call parsing and the tool-call answer shapes (whole and streamed), with a scripted model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from minisgl_frontend_openai.tool_parser import Arguments, CallStart, Content, ToolCallParser
from openai import OpenAI

from minisgl_core.text.chat_tools import conversation
from minisgl_core.wire.schema import ChatMessage, GenerateRequest, TextDelta, ToolCall

FUNCS = {"get_weather", "add"}
AUTO_TEXT = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": '
             '"Par\\"is <tool_call>"}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": '
             '{"a": 1, "b": 2}}\n</tool_call>')
REQUIRED_TEXT = '[{"name": "add", "arguments": {"a": 1, "b": {"c": "}]"}}}, {"name": "get_weather", "arguments": {}}]'  # noqa: E501


def parse(mode: str, text: str, step: int, named: str | None = None) -> dict[str, Any]:
    parser = ToolCallParser(mode, FUNCS, named)
    events = []
    for i in range(0, len(text), step):
        events += parser.feed(text[i:i + step])
    events += parser.finish()
    calls: list[dict[str, str]] = []
    content = ""
    for e in events:
        if isinstance(e, Content):
            content += e.text
        elif isinstance(e, CallStart):
            assert e.index == len(calls) and e.id.startswith("call_")
            calls.append({"name": e.name, "arguments": ""})
        else:
            assert isinstance(e, Arguments)
            calls[e.index]["arguments"] += e.fragment
    return {"content": content, "calls": calls}


@pytest.mark.parametrize("step", [1, 2, 3, 5, 11, 1000])
def test_auto_finds_calls_however_the_text_is_split(step: int) -> None:
    got = parse("auto", AUTO_TEXT, step)
    assert got["content"] == "Let me check."
    assert [c["name"] for c in got["calls"]] == ["get_weather", "add"]
    assert json.loads(got["calls"][0]["arguments"]) == {"city": 'Par"is <tool_call>'}
    assert json.loads(got["calls"][1]["arguments"]) == {"a": 1, "b": 2}


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_auto_leaves_everything_else_as_content(step: int) -> None:
    for text in ("Plain answer with <b>tags</b> and a < sign.", "ends with <tool_",
                 '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
                 "<tool_call>not json</tool_call> after"):
        got = parse("auto", text, step)
        assert got == {"content": text, "calls": []}


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_required_and_named_stream_arguments(step: int) -> None:
    got = parse("required", REQUIRED_TEXT, step)
    assert got["content"] == ""
    assert [(c["name"], json.loads(c["arguments"])) for c in got["calls"]] == [
        ("add", {"a": 1, "b": {"c": "}]"}}), ("get_weather", {})]
    named = parse("named", '{"a": 4}', step, named="add")
    assert named["calls"] == [{"name": "add", "arguments": '{"a": 4}'}]


def test_conversation_uses_the_template_or_the_fallback() -> None:
    tools = json.dumps([{"type": "function", "function": {"name": "f", "parameters": {}}}])
    history = (ChatMessage("user", "hi"),
               ChatMessage("assistant", "", (ToolCall("c1", "f", '{"x": 1}'),)),
               ChatMessage("tool", "42", tool_call_id="c1"))
    native, passed = conversation(history, tools, "{% for t in tools %}{% endfor %}")
    assert passed == json.loads(tools)
    assert native[1]["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}
    assert native[2] == {"role": "tool", "content": "42", "tool_call_id": "c1"}
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
