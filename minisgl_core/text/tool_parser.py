"""Tool calls out of generated text, incrementally: content, call starts and argument fragments.

``auto`` text is free: the model family's format (``tool_parsers``: Hermes / Qwen
``<tool_call>`` blocks by default, Llama 3 JSON, Mistral ``[TOOL_CALLS]``, Qwen3-Coder XML) is
parsed for calls of known functions, anything else is content. ``required`` text is a
grammar-made JSON array of ``{"name", "arguments"}`` objects and ``named`` text is the arguments
object itself, so both stream argument fragments as they are generated. ``collect`` folds the
events into the content and the whole calls, for a frontend that answers with them at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable

from minisgl_core.text.tool_parsers import FamilyParser, family_parser
from minisgl_core.text.tool_parsers.events import (
    Arguments,
    CallStart,
    Content,
    Event,
    call_id,
    partial_suffix,
)
from minisgl_core.text.tool_parsers.tagged import CLOSE, OPEN
from minisgl_core.wire.schema import ToolCall

__all__ = ["CLOSE", "OPEN", "Arguments", "CallStart", "Content", "Event", "ToolCallParser",
           "collect", "partial_suffix"]
# the head of one call object; the grammar writes the name first
_HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


def collect(events: Iterable[Event]) -> tuple[str, list[ToolCall]]:
    """The content text and the calls (arguments joined) that ``events`` make up, in order."""
    content: list[str] = []
    starts: list[CallStart] = []
    arguments: list[list[str]] = []
    for e in events:
        if isinstance(e, Content):
            content.append(e.text)
        elif isinstance(e, CallStart):
            starts.append(e)
            arguments.append([])
        else:
            arguments[e.index].append(e.fragment)
    return "".join(content), [ToolCall(s.id, s.name, "".join(a))
                              for s, a in zip(starts, arguments, strict=True)]


class ToolCallParser:
    """Feed it a choice's text as it comes; it says what is content and what is a call."""

    def __init__(self, mode: str, functions: Collection[str], named: str | None = None,
                 family: str | None = None) -> None:
        self.mode = mode
        self.functions = functions
        self.named = named
        self.family = family  # auto: the model family's format (None: hermes)
        self._calls = 0
        self._buf = ""
        self._free: FamilyParser | None = None  # auto: made at the first feed
        # required: the scan of the JSON array so far
        self._pos = 0
        self._depth = 0
        self._in_str = False
        self._esc = False
        self._elems: list[list[int]] = []  # [start, end (-1 while open)]
        self._sent: list[int] = []  # argument chars sent per call, -1: head not sent yet

    @property
    def calls(self) -> int:
        """How many calls the output made so far."""
        return self._free.calls if self._free is not None else self._calls

    def feed(self, text: str, family: str | None = None) -> list[Event]:
        """Events for ``text``, the next piece of the output; ``family`` (the engine names it
        on each delta of a chat with tools) picks the format of ``auto`` output."""
        if self.mode == "named":
            return self._named(text)
        if self.mode == "required":
            self._buf += text
            return self._required()
        return self._auto(family).feed(text)

    def finish(self) -> list[Event]:
        """Events for whatever is still held back, at the end of the output."""
        if self.mode == "auto":
            return self._auto(None).finish()
        return []

    def _auto(self, family: str | None) -> FamilyParser:
        if self._free is None:
            self._free = family_parser(family or self.family, self.functions)
        return self._free

    def finish_reason(self, reason: str) -> str:
        """``tool_calls`` for an output that ended by itself (``stop``) after making calls."""
        return "tool_calls" if self.calls and reason == "stop" else reason

    # ---- named: everything is the arguments of call 0 ------------------------------------

    def _named(self, text: str) -> list[Event]:
        out: list[Event] = []
        if self._calls == 0:
            assert self.named is not None
            out.append(CallStart(0, call_id(), self.named))
            self._calls = 1
        if text:
            out.append(Arguments(0, text))
        return out

    # ---- required: a JSON array of {"name", "arguments"} ---------------------------------

    def _required(self) -> list[Event]:
        buf = self._buf
        for i in range(self._pos, len(buf)):
            ch = buf[i]
            if self._in_str:
                if self._esc:
                    self._esc = False
                elif ch == "\\":
                    self._esc = True
                elif ch == '"':
                    self._in_str = False
            elif ch == '"':
                self._in_str = True
            elif ch in "[{":
                self._depth += 1
                if self._depth == 2:
                    self._elems.append([i, -1])
                    self._sent.append(-1)
            elif ch in "]}":
                self._depth -= 1
                if self._depth == 1 and self._elems:
                    self._elems[-1][1] = i
        self._pos = len(buf)
        out: list[Event] = []
        for k, (start, end) in enumerate(self._elems):
            if self._sent[k] == -2:
                continue  # complete and fully sent
            text = buf[start:end + 1] if end >= 0 else buf[start:]
            head = _HEAD.match(text)
            if head is None:
                continue
            if self._sent[k] == -1:
                out.append(CallStart(self._calls, call_id(), json.loads(f'"{head.group(1)}"')))
                self._calls += 1
                self._sent[k] = 0
            stop = len(text) - 1 if end >= 0 else len(text)  # the call's own "}" is not sent
            fragment = text[head.end() + self._sent[k]:stop]
            if fragment:
                out.append(Arguments(k, fragment))
                self._sent[k] += len(fragment)
            if end >= 0:
                self._sent[k] = -2
        return out
