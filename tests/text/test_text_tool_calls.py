"""Tools checked and made into grammars; tool calls parsed out of text however it is split."""

from __future__ import annotations

import json
from typing import Any

import pytest

from minisgl_core.sampling import SamplingParams, StructuredOutput
from minisgl_core.text.tool_calls import ToolRequestError, tool_request
from minisgl_core.text.tool_parser import Arguments, CallStart, Content, ToolCallParser, collect

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
    folded, whole = collect(events)
    assert (folded, [{"name": c.name, "arguments": c.arguments} for c in whole]) == (content,
                                                                                     calls)
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


def tool(name: str, **parameters: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": parameters}}}


def test_tool_request_modes_and_grammars() -> None:
    tools = [tool("add", a={"type": "integer"}), tool("note", text={"type": "string"})]
    assert tool_request(None) is None and tool_request([], "none") is None
    auto = tool_request(tools)
    assert auto is not None and (auto.mode, auto.named, auto.parallel) == ("auto", None, True)
    assert json.loads(auto.template_json) == tools
    sampling = SamplingParams(max_tokens=8)
    assert auto.constrain(sampling) is sampling  # auto is free text
    named = tool_request(tools, {"type": "function", "function": {"name": "note"}})
    assert named is not None and (named.mode, named.named) == ("named", "note")
    spec = named.constrain(sampling).structured
    assert spec is not None and json.loads(spec.spec) == tools[1]["function"]["parameters"]
    required = tool_request(tools, "required", False)
    assert required is not None
    spec = required.constrain(sampling).structured
    assert spec is not None and spec.kind == "json_schema"
    schema = json.loads(spec.spec)
    assert (schema["type"], schema["minItems"], schema["maxItems"]) == ("array", 1, 1)
    assert [i["properties"]["name"] for i in schema["items"]["anyOf"]] == [
        {"const": "add"}, {"const": "note"}]
    assert required.parser().finish_reason("stop") == "stop"  # no call made yet


@pytest.mark.parametrize(("args", "param", "says"), [
    (([tool("f")], {"type": "function", "function": {"name": "g"}}), "tool_choice",
     "names the function 'g'"),
    (([tool("f")], "sometimes"), "tool_choice", "must be none, auto, required"),
    ((None, "required"), "tool_choice", "needs 'tools'"),
    (([tool("f"), tool("f")],), "tools.1.function.name", "used twice"),
    (([tool("no spaces")],), "tools.0.function.name", "1-64 letters"),
    (([{"type": "function", "function": {"name": "f", "parameters": []}}],),
     "tools.0.function.parameters", "JSON schema object"),
    (([tool("f")], None, "yes"), "parallel_tool_calls", "must be a boolean"),
])
def test_bad_tools_say_which_field(args: tuple[Any, ...], param: str, says: str) -> None:
    with pytest.raises(ToolRequestError) as err:
        tool_request(*args)
    assert err.value.param == param and says in err.value.message


def test_required_refuses_a_second_grammar() -> None:
    required = tool_request([tool("f")], "required")
    assert required is not None
    with pytest.raises(ToolRequestError, match="cannot be combined") as err:
        required.constrain(SamplingParams(structured=StructuredOutput("json")))
    assert err.value.param == "tool_choice"
