"""Calls written as bare JSON: Llama 3.x (``{"name", "parameters"}`` objects, optionally after
``<|python_tag|>``, ``;`` between calls) and Mistral (``[TOOL_CALLS]`` then a JSON list of
``{"name", "arguments"}``, or ``[TOOL_CALLS]NAME[ARGS]{...}`` from tokenizer v11 on).

Each call is reported once its JSON is complete; text that turns out not to be a call of a known
function is content, as written.
"""

from __future__ import annotations

import json
from typing import Any

from minisgl_core.text.tool_parsers.base import FamilyParser, MarkedParser
from minisgl_core.text.tool_parsers.events import Event

PYTHON_TAG = "<|python_tag|>"
TOOL_CALLS, ARGS = "[TOOL_CALLS]", "[ARGS]"
_DECODER = json.JSONDecoder()


def _decode(text: str, at: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``at`` and where it ends (None: incomplete or not JSON)."""
    try:
        return _DECODER.raw_decode(text, at)
    except ValueError:
        return None


def _skip(text: str, at: int, chars: str = " \t\r\n") -> int:
    while at < len(text) and text[at] in chars:
        at += 1
    return at


class Llama3JsonParser(FamilyParser):
    """An answer that starts with ``{`` or ``<|python_tag|>`` is calls; any other is content."""

    name = "llama3_json"

    def __init__(self, functions: Any) -> None:
        super().__init__(functions)
        self._mode = ""  # "", "calls" or "content": decided by the answer's first characters
        self._at = 0  # calls: where the next call's JSON starts

    def scan(self, *, final: bool) -> list[Event]:
        out: list[Event] = []
        if not self._mode:
            head = self.buf.lstrip()
            if head.startswith((PYTHON_TAG, "{")):
                self._mode = "calls"
            elif head and (final or not PYTHON_TAG.startswith(head)):
                self._mode = "content"
            elif final:
                self.content(self.buf, out)
                self.buf = ""
                return out
            else:
                return out  # nothing but whitespace or the tag's beginning yet
        if self._mode == "calls":
            self._calls(out, final)
        if self._mode == "content":
            self.content(self.buf, out)
            self.buf = ""
        return out

    def _calls(self, out: list[Event], final: bool) -> None:
        buf = self.buf
        while True:
            at = _skip(buf, self._at, " \t\r\n;")
            if buf.startswith(PYTHON_TAG, at):
                at = _skip(buf, at + len(PYTHON_TAG))
            if at >= len(buf):
                return
            decoded = _decode(buf, at)
            if decoded is None and not final:
                return  # the call's JSON is not complete yet
            if decoded is None or not self.json_call(decoded[0], out):
                # not a call: the rest is content as written (all of it when no call came)
                self.buf = buf[self._at:] if self.calls else buf
                self._mode = "content"
                return
            self._at = decoded[1]


class MistralParser(MarkedParser):
    """Content until ``[TOOL_CALLS]``; after it, the calls as a JSON list (or ``NAME[ARGS]{}``)."""

    name = "mistral"
    marker = TOOL_CALLS

    def calls_after_marker(self, out: list[Event], final: bool) -> bool:
        end = self._calls(self.buf, out)
        if end is None:
            if final:  # calls that never completed: content, marker and all
                self.content(TOOL_CALLS + self.buf, out)
                self.buf = ""
            return False
        self.buf = self.buf[end:]
        return True

    def _calls(self, buf: str, out: list[Event]) -> int | None:
        """Report the calls at the start of ``buf``; where they end (None: not complete yet,
        or not calls)."""
        at = _skip(buf, 0)
        if buf.startswith(("[", "{"), at):
            decoded = _decode(buf, at)
            if decoded is None:
                return None
            calls = decoded[0] if isinstance(decoded[0], list) else [decoded[0]]
            if not calls or not all(isinstance(c, dict) and c.get("name") in self.functions
                                    for c in calls):
                return None  # nothing of a list with a bad entry is a call
            for c in calls:
                self.json_call(c, out)
            return decoded[1]
        args = buf.find(ARGS, at)
        if args < 0:
            return None
        decoded = _decode(buf, _skip(buf, args + len(ARGS)))
        if decoded is None or not self.call(buf[at:args].strip(), decoded[0], out):
            return None
        return decoded[1]
