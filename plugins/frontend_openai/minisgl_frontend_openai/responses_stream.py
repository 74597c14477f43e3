"""A Responses API answer built from the engine's deltas: its output items (``reasoning``,
``message``, ``function_call``) and, streamed, the events OpenAI sends for them, each with its
``sequence_number``.

One ``ResponseEvents`` serves both forms: a whole answer is built from the same deltas, and is
the object the stream's ``response.completed`` (or ``response.incomplete``) carries.
"""

from __future__ import annotations

import copy
from typing import Any

from minisgl_core.api import Arguments, CallStart, Content, TextDelta, ToolRequest
from minisgl_frontend_openai.responses_input import Item, new_id

Event = dict[str, Any]


class OutputItems:
    """The output items of one answer, grown delta by delta; every change returns its events
    (without sequence numbers)."""

    def __init__(self, tools: ToolRequest | None) -> None:
        self._parser = tools.parser() if tools is not None and tools.mode != "none" else None
        self.items: list[Item] = []
        self._open: Item | None = None  # the item deltas go to; closed by the next kind
        self.reasoning_tokens = 0
        self.made_calls = False

    def feed(self, delta: TextDelta) -> list[Event]:
        """The events of one delta (the last one, with a finish reason, closes the answer)."""
        events: list[Event] = []
        if delta.reasoning:
            if not delta.text:  # a mixed delta's tokens count as answer tokens
                self.reasoning_tokens += len(delta.token_ids)
            events += self._append("reasoning", delta.reasoning)
        if self._parser is None:
            parsed: list[Any] = [Content(delta.text)] if delta.text else []
        else:
            parsed = self._parser.feed(delta.text, delta.tool_parser) if delta.text else []
            if delta.finish_reason is not None:
                parsed += self._parser.finish()
        for event in parsed:
            if isinstance(event, Content):
                events += self._append("message", event.text)
            elif isinstance(event, CallStart):
                events += self._open_call(event)
            elif isinstance(event, Arguments):
                events += self._append("function_call", event.fragment)
        if delta.finish_reason is not None:
            if not self.items:  # an empty answer is still one (empty) message
                events += self._open_text("message")
            events += self.close("incomplete" if delta.finish_reason == "length" else "completed")
        return events

    def close(self, status: str = "completed") -> list[Event]:
        """Close the open item (if any): its ``.done`` events."""
        item, self._open = self._open, None
        if item is None:
            return []
        item["status"] = status
        where = {"item_id": item["id"], "output_index": len(self.items) - 1}
        kind = item["type"]
        if kind == "function_call":
            events = [{"type": "response.function_call_arguments.done", **where,
                       "name": item["name"], "arguments": item["arguments"]}]
        else:
            part = item["content"][0]
            done = "response.output_text.done" if kind == "message" \
                else "response.reasoning_text.done"
            events = [{"type": done, **where, "content_index": 0, "text": part["text"],
                       **({"logprobs": []} if kind == "message" else {})},
                      {"type": "response.content_part.done", **where, "content_index": 0,
                       "part": copy.deepcopy(part)}]
        return [*events, {"type": "response.output_item.done", "output_index": where[
            "output_index"], "item": copy.deepcopy(item)}]

    def _start(self, item: Item) -> list[Event]:
        events = self.close()
        self.items.append(item)
        self._open = item
        added = {**copy.deepcopy(item), "status": "in_progress"}
        if "content" in added:
            added["content"] = []
        return [*events, {"type": "response.output_item.added",
                          "output_index": len(self.items) - 1, "item": added}]

    def _open_call(self, call: CallStart) -> list[Event]:
        self.made_calls = True
        return self._start({"id": new_id("fc"), "type": "function_call", "call_id": call.id,
                            "name": call.name, "arguments": "", "status": "in_progress"})

    def _open_text(self, kind: str) -> list[Event]:
        """Start a ``message`` or ``reasoning`` item with its one, empty, text part."""
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []} \
            if kind == "message" else {"type": "reasoning_text", "text": ""}
        item = {"id": new_id("msg" if kind == "message" else "rs"), "type": kind,
                "status": "in_progress", "content": [part],
                **({"role": "assistant"} if kind == "message" else {"summary": []})}
        return [*self._start(item), {
            "type": "response.content_part.added", "item_id": item["id"],
            "output_index": len(self.items) - 1, "content_index": 0, "part": copy.deepcopy(part)}]

    def _append(self, kind: str, text: str) -> list[Event]:
        if not text:
            return []
        events: list[Event] = []
        if self._open is None or self._open["type"] != kind:
            if kind == "function_call":  # arguments without a call: the parser never does it
                return []
            events = self._open_text(kind)
        item = self._open
        assert item is not None
        where = {"item_id": item["id"], "output_index": len(self.items) - 1}
        if kind == "function_call":
            item["arguments"] += text
            return [*events, {"type": "response.function_call_arguments.delta", **where,
                              "delta": text}]
        item["content"][0]["text"] += text
        if kind == "message":
            return [*events, {"type": "response.output_text.delta", **where, "content_index": 0,
                              "delta": text, "logprobs": []}]
        return [*events, {"type": "response.reasoning_text.delta", **where, "content_index": 0,
                          "delta": text}]


class ResponseEvents:
    """One response: its object (``skeleton`` holds the echoed request fields) and its stream."""

    def __init__(self, skeleton: dict[str, Any], tools: ToolRequest | None) -> None:
        self.skeleton = skeleton
        self.output = OutputItems(tools)
        self._sequence = 0
        self.final: dict[str, Any] | None = None  # the finished response object

    def numbered(self, events: list[Event]) -> list[Event]:
        """``events`` with the stream's next sequence numbers."""
        for event in events:
            event["sequence_number"] = self._sequence
            self._sequence += 1
        return events

    def opening(self) -> list[Event]:
        """``response.created`` and ``response.in_progress``."""
        snapshot = {**self.skeleton, "status": "in_progress", "output": [], "usage": None}
        return self.numbered([{"type": "response.created", "response": snapshot},
                               {"type": "response.in_progress",
                                "response": copy.deepcopy(snapshot)}])

    def feed(self, delta: TextDelta) -> list[Event]:
        """The events of one delta; the last one ends with the terminal event."""
        events = self.output.feed(delta)
        if delta.finish_reason is not None:
            final = self.finish(delta.finish_reason, delta.prompt_tokens,
                                delta.completion_tokens, delta.cached_tokens)
            terminal = "response.incomplete" if final["status"] == "incomplete" \
                else "response.completed"
            events.append({"type": terminal, "response": final})
        return self.numbered(events)

    def finish(self, reason: str, prompt_tokens: int, completion_tokens: int,
               cached_tokens: int) -> dict[str, Any]:
        """The finished response object (also kept as ``final``)."""
        incomplete = reason == "length"
        self.final = {
            **self.skeleton, "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "output": copy.deepcopy(self.output.items),
            "usage": {"input_tokens": prompt_tokens,
                      "input_tokens_details": {"cached_tokens": cached_tokens,
                                               "cache_write_tokens": 0},
                      "output_tokens": completion_tokens,
                      "output_tokens_details": {"reasoning_tokens": min(
                          self.output.reasoning_tokens, completion_tokens)},
                      "total_tokens": prompt_tokens + completion_tokens}}
        return self.final
