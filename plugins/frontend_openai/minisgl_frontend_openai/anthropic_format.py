"""Anthropic's message object and its stream events, made from one choice's deltas.

Content comes as blocks: the reasoning split's thinking (``thinking``), text (``text``) and tool
calls parsed from the text (``tool_use``). Streamed, each block opens with
``content_block_start``, grows by ``content_block_delta`` (``thinking_delta``, ``text_delta``,
``input_json_delta``) and ends with ``content_block_stop``, between ``message_start`` and
``message_delta`` (stop reason, usage) + ``message_stop``.
"""

from __future__ import annotations

import json
from typing import Any

from minisgl_core.api import (
    Arguments,
    CallStart,
    Content,
    Event,
    TextDelta,
    ToolCallParser,
    ToolRequest,
    collect_tool_calls,
)

StreamEvent = tuple[str, dict[str, Any]]  # (the SSE ``event:`` name, its data)


def tool_use_id(call_id: str) -> str:
    """Anthropic's ``toolu_`` spelling of a call id."""
    return "toolu_" + call_id.removeprefix("call_")


def stop_reason(finish_reason: str, made_calls: bool, stop_string: str | None) -> str:
    """Anthropic's stop_reason of an engine finish reason."""
    if finish_reason == "length":
        return "max_tokens"
    if made_calls:
        return "tool_use"
    return "stop_sequence" if stop_string is not None else "end_turn"


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:  # arguments cut short by max_tokens: nothing trustworthy to hand over
        return {}
    return value if isinstance(value, dict) else {}


class MessageFormat:
    """One answer as Anthropic's message (``full``) or stream events (``feed`` / ``finish``)."""

    def __init__(self, *, message_id: str, model: str, tools: ToolRequest | None,
                 show_thinking: bool = True) -> None:
        self.message_id = message_id
        self.model = model
        self.tools = tools if tools is not None and tools.mode != "none" else None
        self.show_thinking = show_thinking
        self._parser: ToolCallParser | None = self.tools.parser() if self.tools else None
        self._started = False
        self._open: str | None = None  # the kind of the block being streamed
        self._index = -1  # its index among the message's blocks
        self._prompt_tokens = 0

    def _events_of_text(self, text: str, final: bool, family: str | None) -> list[Event]:
        if self._parser is None:
            return [Content(text)] if text else []
        events = self._parser.feed(text, family) if text else []
        return events + self._parser.finish() if final else events

    def envelope(self, content: list[dict[str, Any]], reason: str | None,
                 stop_string: str | None, usage: dict[str, int]) -> dict[str, Any]:
        """The message object."""
        return {"id": self.message_id, "type": "message", "role": "assistant",
                "model": self.model, "content": content, "stop_reason": reason,
                "stop_sequence": stop_string, "usage": usage}

    # ---- whole -------------------------------------------------------------------------------

    def full(self, reasoning: str, text: str, finish_reason: str, stop_string: str | None,
             usage: dict[str, int], family: str | None = None) -> dict[str, Any]:
        """The non-streaming answer; ``family``: the format of its tool calls."""
        content: list[dict[str, Any]] = []
        if reasoning and self.show_thinking:
            content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        text, calls = collect_tool_calls(self._events_of_text(text, True, family))
        if text:
            content.append({"type": "text", "text": text})
        content += [{"type": "tool_use", "id": tool_use_id(c.id), "name": c.name,
                     "input": _input(c.arguments)} for c in calls]
        return self.envelope(content, stop_reason(finish_reason, bool(calls), stop_string),
                             stop_string, usage)

    # ---- streamed ----------------------------------------------------------------------------

    def feed(self, delta: TextDelta) -> list[StreamEvent]:
        """The events of one delta (``message_start`` first; none of the final ones)."""
        out: list[StreamEvent] = []
        if not self._started:
            self._started = True
            self._prompt_tokens = delta.prompt_tokens
            out.append(("message_start", {"type": "message_start", "message": self.envelope(
                [], None, None, {"input_tokens": delta.prompt_tokens, "output_tokens": 0})}))
            out.append(("ping", {"type": "ping"}))
        if delta.reasoning and self.show_thinking:
            out += self._block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": delta.reasoning}))
        for event in self._events_of_text(delta.text, delta.finish_reason is not None,
                                          delta.tool_parser):
            if isinstance(event, Content):
                out += self._block("text", {"type": "text", "text": ""})
                out.append(self._delta({"type": "text_delta", "text": event.text}))
            elif isinstance(event, CallStart):
                out += self._block("tool_use", {"type": "tool_use", "id": tool_use_id(event.id),
                                                "name": event.name, "input": {}}, new=True)
            elif isinstance(event, Arguments):
                out.append(self._delta({"type": "input_json_delta",
                                        "partial_json": event.fragment}))
        return out

    def finish(self, finish_reason: str, stop_string: str | None, prompt_tokens: int,
               output_tokens: int, cached_tokens: int = 0) -> list[StreamEvent]:
        """The closing events, after the final delta was fed (its counts are the totals)."""
        out = self._close()
        made_calls = self._parser is not None and self._parser.calls > 0
        reason = stop_reason(finish_reason, made_calls, stop_string)
        usage = {"input_tokens": prompt_tokens or self._prompt_tokens,
                 "output_tokens": output_tokens, "cache_read_input_tokens": cached_tokens}
        out.append(("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": reason, "stop_sequence": stop_string}, "usage": usage}))
        out.append(("message_stop", {"type": "message_stop"}))
        return out

    def _block(self, kind: str, start: dict[str, Any], *, new: bool = False
               ) -> list[StreamEvent]:
        """Open a ``kind`` block unless one is open already (``new``: always a fresh one)."""
        if self._open == kind and not new:
            return []
        out = self._close()
        self._index += 1
        self._open = kind
        out.append(("content_block_start", {"type": "content_block_start",
                                            "index": self._index, "content_block": start}))
        return out

    def _delta(self, delta: dict[str, Any]) -> StreamEvent:
        return ("content_block_delta", {"type": "content_block_delta", "index": self._index,
                                        "delta": delta})

    def _close(self) -> list[StreamEvent]:
        if self._open is None:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index})]
