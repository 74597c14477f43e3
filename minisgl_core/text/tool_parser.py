"""Tool calls out of generated text, incrementally: content, call starts and argument fragments.

``auto`` text is free: ``<tool_call>{"name", "arguments"}</tool_call>`` blocks (Hermes / Qwen) are
calls when their JSON names a known function, anything else is content. ``required`` text is a
grammar-made JSON array of ``{"name", "arguments"}`` objects and ``named`` text is the arguments
object itself, so both stream argument fragments as they are generated. ``collect`` folds the
events into the content and the whole calls, for a frontend that answers with them at the end.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from minisgl_core.wire.schema import ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# the head of one call object; the grammar writes the name first
_HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


@dataclass(frozen=True)
class Content:
    """Plain assistant text."""

    text: str


@dataclass(frozen=True)
class CallStart:
    """A new tool call: its index in the answer, id and function name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class Arguments:
    """More of call ``index``'s arguments (JSON text)."""

    index: int
    fragment: str


Event = Content | CallStart | Arguments


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


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallParser:
    """Feed it a choice's text as it comes; it says what is content and what is a call."""

    def __init__(self, mode: str, functions: Collection[str], named: str | None = None) -> None:
        self.mode = mode
        self.functions = functions
        self.named = named
        self.calls = 0
        self._buf = ""
        self._in_call = False
        self._held = ""  # auto: whitespace kept back (dropped if nothing but calls follow)
        self._after_call = False
        # required: the scan of the JSON array so far
        self._pos = 0
        self._depth = 0
        self._in_str = False
        self._esc = False
        self._elems: list[list[int]] = []  # [start, end (-1 while open)]
        self._sent: list[int] = []  # argument chars sent per call, -1: head not sent yet

    def feed(self, text: str) -> list[Event]:
        """Events for ``text``, the next piece of the output."""
        if self.mode == "named":
            return self._named(text)
        self._buf += text
        return self._required() if self.mode == "required" else self._auto(final=False)

    def finish(self) -> list[Event]:
        """Events for whatever is still held back, at the end of the output."""
        if self.mode == "auto":
            return self._auto(final=True)
        return []

    def finish_reason(self, reason: str) -> str:
        """``tool_calls`` for an output that ended by itself (``stop``) after making calls."""
        return "tool_calls" if self.calls and reason == "stop" else reason

    # ---- named: everything is the arguments of call 0 ------------------------------------

    def _named(self, text: str) -> list[Event]:
        out: list[Event] = []
        if self.calls == 0:
            assert self.named is not None
            out.append(CallStart(0, _call_id(), self.named))
            self.calls = 1
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
                out.append(CallStart(self.calls, _call_id(), json.loads(f'"{head.group(1)}"')))
                self.calls += 1
                self._sent[k] = 0
            stop = len(text) - 1 if end >= 0 else len(text)  # the call's own "}" is not sent
            fragment = text[head.end() + self._sent[k]:stop]
            if fragment:
                out.append(Arguments(k, fragment))
                self._sent[k] += len(fragment)
            if end >= 0:
                self._sent[k] = -2
        return out

    # ---- auto: <tool_call> blocks in free text -------------------------------------------

    def _auto(self, *, final: bool) -> list[Event]:
        out: list[Event] = []
        while True:
            if not self._in_call:
                at = self._buf.find(OPEN)
                if at >= 0:
                    self._content(self._buf[:at], out)
                    self._buf, self._in_call = self._buf[at + len(OPEN):], True
                    continue
                keep = 0 if final else _partial(self._buf, OPEN)
                self._content(self._buf[:len(self._buf) - keep], out)
                self._buf = self._buf[len(self._buf) - keep:]
                break
            at = self._buf.find(CLOSE)
            if at < 0 and not final:
                break
            body = self._buf if at < 0 else self._buf[:at]
            self._buf = "" if at < 0 else self._buf[at + len(CLOSE):]
            self._in_call = False
            if not self._call(body, out):
                self._content(OPEN + body + ("" if at < 0 else CLOSE), out)
            if at < 0:
                break
        if final and self._held and not self.calls:
            out.append(Content(self._held))
            self._held = ""
        return out

    def _content(self, text: str, out: list[Event]) -> None:
        text = self._held + text
        body = text.rstrip()
        self._held = text[len(body):]  # trailing whitespace waits: a call may come next
        if self._after_call:
            body = body.lstrip()
        if body:
            out.append(Content(body))
            self._after_call = False

    def _call(self, body: str, out: list[Event]) -> bool:
        try:
            call = json.loads(body.strip())
        except ValueError:
            return False
        if not isinstance(call, dict) or call.get("name") not in self.functions:
            return False
        args = call.get("arguments", call.get("parameters", {}))
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        out.append(CallStart(self.calls, _call_id(), call["name"]))
        out.append(Arguments(self.calls, text))
        self.calls += 1
        self._held = ""  # whitespace between blocks is not content
        self._after_call = True
        return True


def _partial(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that begins ``tag`` (held back, it may be it)."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
