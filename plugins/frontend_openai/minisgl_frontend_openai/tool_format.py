"""Chat answers with tool calls: ``message.tool_calls`` whole, or streamed as OpenAI streams them.

Streamed, a call first arrives with its index, id, type and name (arguments ``""``), then as
argument fragments under the same index; ``finish_reason`` is ``tool_calls`` when the answer made
calls. Token ids and logprobs of text held back (a possible ``<tool_call>`` tag) ride on the next
chunk.
"""

from __future__ import annotations

from typing import Any

from minisgl_core.api import (
    Arguments,
    CallStart,
    Content,
    TextDelta,
    TextLogprob,
    ToolCallParser,
    ToolRequest,
    collect_tool_calls,
)
from minisgl_frontend_openai.generation import ChoiceState
from minisgl_frontend_openai.responses import ChatFormat, with_reasoning


class ToolChatFormat(ChatFormat):
    """ChatFormat whose choices are parsed for tool calls (tool_choice auto, required, named)."""

    def __init__(self, tools: ToolRequest, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tools = tools
        self._parsers: dict[int, ToolCallParser] = {}
        self._pending: dict[int, tuple[list[int], list[TextLogprob]]] = {}

    def _parser(self, index: int) -> ToolCallParser:
        if index not in self._parsers:
            self._parsers[index] = self.tools.parser()
        return self._parsers[index]

    def delta_chunks(self, index: int, delta: TextDelta) -> list[dict[str, Any]]:
        out, delta = self.reasoning_chunks(index, delta)  # calls are parsed from the content
        parser = self._parser(index)
        events = parser.feed(delta.text, delta.tool_parser) if delta.text else []
        if delta.finish_reason is not None:
            events += parser.finish()
        ids, logprobs = self._pending.setdefault(index, ([], []))
        ids.extend(delta.token_ids)
        logprobs.extend(delta.logprobs)
        for event in events:
            if isinstance(event, Content):
                out.append(self.text_chunk(index, event.text, tuple(ids), tuple(logprobs)))
            else:
                choice = {"index": index, "delta": {"tool_calls": [_call_delta(event)]},
                          "logprobs": None, "finish_reason": None}
                out.append(self._envelope(self.chunk_object_name,
                                          [self._with_ids(choice, ids, logprobs)]))
            ids.clear()
            logprobs.clear()
        if delta.finish_reason is not None:
            out.append(self.final_chunk(index, parser.finish_reason(delta.finish_reason),
                                        tuple(ids), tuple(logprobs)))
            self._pending.pop(index, None)
        return out

    def _full_choice(self, index: int, choice: ChoiceState) -> dict[str, Any]:
        parser = self.tools.parser(choice.tool_parser)
        content, calls = collect_tool_calls(parser.feed("".join(choice.text)) + parser.finish())
        message = with_reasoning({"role": "assistant", "content": content or None}, choice)
        if calls:
            message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.arguments}} for c in calls]
        else:
            message["content"] = content
        return {"index": index, "message": message, "logprobs": None,
                "finish_reason": parser.finish_reason(choice.finish_reason or "stop")}


def _call_delta(event: CallStart | Arguments) -> dict[str, Any]:
    if isinstance(event, CallStart):
        return {"index": event.index, "id": event.id, "type": "function",
                "function": {"name": event.name, "arguments": ""}}
    return {"index": event.index, "function": {"arguments": event.fragment}}


def chat_format(tools: ToolRequest | None, **kwargs: Any) -> ChatFormat:
    """The response format of a chat request: parsed for tool calls unless tools are off."""
    if tools is None or tools.mode == "none":
        return ChatFormat(**kwargs)
    return ToolChatFormat(tools, **kwargs)
