"""Tool definitions, tool calls and tool results in a chat prompt, with or without template help.

A chat template that mentions ``tools`` (Qwen2.5, Hermes, Llama 3.1 ...) gets them the HF way:
``tools=`` for the definitions, ``tool_calls`` on assistant turns and ``role: "tool"`` turns.
A template without a tools section (the default SmolLM2's) gets the Hermes convention written
into the conversation instead: the definitions as JSON lines inside ``<tools></tools>`` in the
system prompt, with the instruction to answer ``<tool_call>{"name", "arguments"}</tool_call>``;
earlier calls as such blocks in the assistant's content; tool results as user turns wrapped in
``<tool_response></tool_response>``. Either way the model is asked for the format the OpenAI
frontend parses.

The HF way follows what the families' templates expect of a turn: a ``tool`` turn names the
function it answers (``name``: Hermes' template refuses one without it), and Mistral's template
takes only call ids of 9 letters and digits, so its ids are shortened the way vLLM shortens them
(the last 9), the same for a call and for its result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from minisgl_core.text.tool_parsers import detect
from minisgl_core.wire.schema import ChatMessage, ToolCall

MISTRAL_ID_LENGTH = 9
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")

FALLBACK_PROMPT = (
    "# Tools\n\nYou can call functions to help answer. Their signatures, one JSON object per "
    "line, are inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n\nTo call a function, "
    "answer with a JSON object holding its name and arguments inside <tool_call></tool_call>; "
    "one block per call:\n<tool_call>\n{{\"name\": <function name>, \"arguments\": "
    "<arguments as a JSON object>}}\n</tool_call>"
)


def supports_tools(template: Any) -> bool:
    """True when the chat template renders ``tools`` itself."""
    return isinstance(template, str) and "tools" in template


def _arguments(text: str) -> Any:
    """Templates expect the arguments as a mapping (they ``tojson`` them); keep text otherwise."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _call_block(call: ToolCall) -> str:
    body = json.dumps({"name": call.name, "arguments": _arguments(call.arguments)},
                      ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def conversation(messages: Sequence[ChatMessage], tools_json: str | None,
                 template: Any) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """The messages as template dicts, and the ``tools=`` to pass (None: nothing to pass)."""
    tools = json.loads(tools_json) if tools_json else None
    # a conversation without tool definitions or calls renders as it always did
    uses_tools = tools is not None or any(m.tool_calls for m in messages)
    if not uses_tools:
        return [{"role": m.role, "content": m.content} for m in messages], None
    if supports_tools(template):
        names = {c.id: c.name for m in messages for c in m.tool_calls}
        call_id = mistral_call_id if detect(template) == "mistral" else str
        return [_native(m, names, call_id) for m in messages], tools
    return _fallback(messages, tools), None


def mistral_call_id(call_id: str) -> str:
    """``call_id`` as Mistral's template takes it: its last 9 letters and digits (0-padded)."""
    return _NOT_ALNUM.sub("", call_id)[-MISTRAL_ID_LENGTH:].rjust(MISTRAL_ID_LENGTH, "0")


def _native(m: ChatMessage, names: dict[str, str],
            call_id: Callable[[str], str]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"id": call_id(c.id), "type": "function", "function": {
            "name": c.name, "arguments": _arguments(c.arguments)}} for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = call_id(m.tool_call_id)
        if m.tool_call_id in names:  # the function this result answers
            out["name"] = names[m.tool_call_id]
    return out


def _fallback(messages: Sequence[ChatMessage], tools: list[Any] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "user",
                        "content": f"<tool_response>\n{m.content}\n</tool_response>"})
        elif m.tool_calls:
            blocks = "\n".join(_call_block(c) for c in m.tool_calls)
            out.append({"role": m.role, "content": f"{m.content}\n{blocks}".strip()})
        else:
            out.append({"role": m.role, "content": m.content})
    if tools:
        lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        section = FALLBACK_PROMPT.format(tools=lines)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{section}".strip()}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out
