"""Each model family's tool-call parser reads back the calls its chat template writes, whole and
token by token; the family is picked from the template (or named); text that is no call stays
content.

The templates are written the way each family's own chat template writes an assistant turn's
calls (Hermes / Qwen 2.5, Llama 3.1 JSON, Mistral, Qwen3-Coder), rendered by a tiny model's real
HF tokenizer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from minisgl_core.config.launch import ConfigError, LaunchConfig
from minisgl_core.testing.tiny import make_tiny_model
from minisgl_core.text.hf import load_tokenizer
from minisgl_core.text.tokenize import TokenizerRole
from minisgl_core.text.tool_parser import Content, ToolCallParser, collect
from minisgl_core.text.tool_parsers import detect, parser_names
from minisgl_core.wire.schema import ChatMessage, GenerateRequest, SamplingParams

END = "<|end|>"  # every template ends the assistant's turn with it
TEMPLATES = {
    "hermes": (
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
        "{%- if m.content %}{{ '\\n' + m.content }}{% endif %}"
        "{%- for c in m.tool_calls or [] %}\n<tool_call>\n"
        '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
        "\n</tool_call>{%- endfor %}<|end|>\n{%- endfor %}"),
    "llama3_json": (
        "{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{{ '\\n\\n' }}"
        "{%- if m.role == 'ipython' %}{{ m.content | tojson }}{% endif %}"
        # Llama 3.1's template writes one call per turn (it refuses more)
        "{%- if m.tool_calls %}{%- for c in m.tool_calls[:1] %}"
        '{{- \'{"name": "\' + c.function.name + \'", "parameters": \' }}'
        "{{- c.function.arguments | tojson }}}{%- endfor %}"
        "{%- else %}{{ m.content }}{%- endif %}<|end|>{%- endfor %}"),
    "mistral": (
        "{%- for m in messages %}{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
        "{%- elif m.tool_calls %}{{ m.content or '' }}[TOOL_CALLS][{%- for c in m.tool_calls %}"
        '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
        "{%- if not loop.last %}, {% endif %}{%- endfor %}]<|end|>"
        "{%- else %}{{ m.content }}<|end|>{%- endif %}{%- endfor %}"),
    "qwen3_coder": (
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
        "{%- if m.content %}{{ '\\n' + m.content }}{% endif %}"
        "{%- for c in m.tool_calls or [] %}\n<tool_call>\n<function={{ c.function.name }}>\n"
        "{%- for k, v in c.function.arguments.items() %}\n<parameter={{ k }}>\n"
        "{{- '\\n' + (v if v is string else v | tojson) }}\n</parameter>{%- endfor %}"
        "\n</function>\n</tool_call>{%- endfor %}<|end|>\n{%- endfor %}"),
}
SCHEMAS = {
    "get_weather": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "units": {"type": "object"}}},
    "add": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}
CALLS = [("get_weather", {"city": "Par\"is <tool_call> 東京", "days": 3,
                          "units": {"temp": "C"}}),
         ("add", {"a": 1, "b": 2.5})]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each family's assistant turn with CALLS (after 'Sure.'), as its template renders it."""
    out = {}
    for family, template in TEMPLATES.items():
        model = make_tiny_model(tmp_path_factory.mktemp(family) / "tiny", "llama",
                                chat_template=template)
        tokenizer = load_tokenizer(model)
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
                 for i, (n, a) in enumerate(CALLS)]
        content = "" if family == "llama3_json" else "Sure."  # Llama 3 calls are the answer
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": content, "tool_calls": calls}], tokenize=False)
        turn = text.split(END)[-2]  # the assistant's turn, without what opens it
        for opener in ("<|im_start|>assistant\n", "[/INST]",
                       "<|start_header_id|>assistant<|end_header_id|>\n\n"):
            turn = turn.split(opener)[-1]
        out[family] = turn
    return out


def parse(family: str, text: str, step: int | None) -> tuple[str, list[Any]]:
    parser = ToolCallParser("auto", SCHEMAS, family=family)
    pieces = [text] if step is None else [text[i:i + step] for i in range(0, len(text), step)]
    events = [e for piece in pieces for e in parser.feed(piece)] + parser.finish()
    content, calls = collect(events)
    assert parser.finish_reason("stop") == ("tool_calls" if calls else "stop")
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("family", sorted(TEMPLATES))
@pytest.mark.parametrize("step", [None, 1, 3])
def test_each_family_reads_its_templates_calls(rendered: dict[str, str], family: str,
                                              step: int | None) -> None:
    content, calls = parse(family, rendered[family], step)
    assert calls == (CALLS[:1] if family == "llama3_json" else CALLS)
    assert content == ("" if family == "llama3_json" else "Sure.")


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_the_family_is_read_from_the_template(family: str) -> None:
    assert detect(TEMPLATES[family]) == family
    assert sorted(TEMPLATES) == parser_names()


def test_templates_without_calls_get_hermes_the_fallback_format() -> None:
    assert detect(None) == detect("{{ messages }}") == "hermes"
    assert detect("{% if message.role == 'ipython' %}") == "llama3_json"


@pytest.mark.parametrize("family", sorted(TEMPLATES))
@pytest.mark.parametrize("step", [None, 1])
def test_text_that_is_no_call_stays_content(family: str, step: int | None) -> None:
    for text in ("Plain words, no call.", '{"name": "unknown", "arguments": {}}',
                 "<tool_call>not json</tool_call>", "[TOOL_CALLS][{\"name\": \"nope\"}]"):
        content, calls = parse(family, text, step)
        assert (content, calls) == (text, []), (family, text)


@pytest.mark.parametrize("step", [None, 1])
def test_llama3_python_tag_and_several_calls(step: int | None) -> None:
    text = ('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}; '
            '{"name": "add", "arguments": {"a": 3, "b": 4}}')
    assert parse("llama3_json", text, step) == ("", [("add", {"a": 1, "b": 2}),
                                                     ("add", {"a": 3, "b": 4})])
    # a JSON answer that is not a call is the answer
    assert parse("llama3_json", '{"a": 1}', step) == ('{"a": 1}', [])


@pytest.mark.parametrize("step", [None, 2])
def test_mistral_v11_calls(step: int | None) -> None:
    text = 'Let me see.[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2}[TOOL_CALLS]add[ARGS]{"a": 5}'
    assert parse("mistral", text, step) == ("Let me see.", [("add", {"a": 1, "b": 2}),
                                                            ("add", {"a": 5})])


def test_calls_stream_before_the_answer_ends() -> None:
    """A call is reported as soon as its text is complete, not only at the end."""
    for family, text in (("mistral", '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}]'),
                         ("llama3_json", '{"name": "add", "parameters": {"a": 1}}'),
                         ("qwen3_coder", "<tool_call><function=add><parameter=a>1</parameter>"
                                         "</function></tool_call>")):
        parser = ToolCallParser("auto", SCHEMAS, family=family)
        events = [e for ch in text for e in parser.feed(ch)]
        assert collect(events)[1][0].name == "add", family
        assert not [e for e in parser.finish() if not isinstance(e, Content)]


def test_the_tokenizer_names_the_family_on_chats_with_tools(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The template's family, or --tool-call-parser's; Mistral's marker is a special token, so
    its answers keep special tokens; a request without tools names none."""
    model = make_tiny_model(tmp_path_factory.mktemp("mistral") / "tiny", "llama",
                            chat_template=TEMPLATES["mistral"])
    tools = json.dumps([{"type": "function", "function": {"name": "add", "parameters": {}}}])

    def info(role: TokenizerRole, with_tools: bool) -> Any:
        tokenized = role.tokenize(GenerateRequest(
            request_id="r", owner="o", sampling=SamplingParams(max_tokens=4),
            messages=(ChatMessage("user", "hi"),), tools=tools if with_tools else None))
        assert tokenized.error is None
        return tokenized.detokenize

    detected = TokenizerRole(model, 8192)
    assert (info(detected, True).tool_parser, info(detected, True).skip_special_tokens) == (
        "mistral", False)
    assert (info(detected, False).tool_parser, info(detected, False).skip_special_tokens) == (
        None, True)
    named = TokenizerRole(model, 8192, tool_call_parser="llama3_json")
    assert (info(named, True).tool_parser, info(named, True).skip_special_tokens) == (
        "llama3_json", True)
    with pytest.raises(ConfigError, match="tool_call_parser must be one of"):
        LaunchConfig(tool_call_parser="llama4")
