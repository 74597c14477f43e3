"""The common ground of the model families' parsers: content around calls, and calls reported.

A family parser sees the answer's text piece by piece (``feed``) and at its end (``finish``),
keeps what it cannot place yet in a buffer and ``scan``s it; it reports content as it becomes
certain it is not part of a call, and each call when its text is complete. Whitespace next to
calls is not content (templates put newlines around them). ``MarkedParser`` is the scan of the
families whose calls follow a marker (``<tool_call>``, ``[TOOL_CALLS]``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from minisgl_core.text.tool_parsers.events import (
    Arguments,
    CallStart,
    Content,
    Event,
    call_id,
    partial_suffix,
)


class FamilyParser:
    """Base of a family's parser of free (``tool_choice: auto``) answers."""

    name = ""

    def __init__(self, functions: Collection[str]) -> None:
        self.functions = functions
        # name -> parameters schema, when the caller knows them (types of XML parameters)
        self.schemas: Mapping[str, Any] = functions if isinstance(functions, Mapping) else {}
        self.calls = 0
        self.buf = ""  # the answer's text not placed yet (``scan`` consumes it)
        self._held = ""  # whitespace kept back (dropped if nothing but calls follow)
        self._after_call = False

    def feed(self, text: str) -> list[Event]:
        """Events for ``text``, the next piece of the answer."""
        self.buf += text
        return self.scan(final=False)

    def finish(self) -> list[Event]:
        """Events for whatever is still held back, at the end of the answer."""
        out = self.scan(final=True)
        self.end_content(out)
        return out

    def scan(self, *, final: bool) -> list[Event]:
        """Events for what ``buf`` holds now (``final``: nothing more will come)."""
        raise NotImplementedError

    def content(self, text: str, out: list[Event]) -> None:
        """Report ``text`` as content, trailing whitespace held back (a call may come next)."""
        text = self._held + text
        body = text.rstrip()
        self._held = text[len(body):]
        if self._after_call:
            body = body.lstrip()
        if body:
            out.append(Content(body))
            self._after_call = False

    def end_content(self, out: list[Event]) -> None:
        """At the end: held whitespace is content only when the answer made no call."""
        if self._held and not self.calls:
            out.append(Content(self._held))
        self._held = ""

    def call(self, name: Any, arguments: Any, out: list[Event]) -> bool:
        """Report a call of ``name`` (False, nothing reported: not a known function)."""
        if not isinstance(name, str) or name not in self.functions:
            return False
        if arguments is None:
            arguments = {}
        text = arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                       ensure_ascii=False)
        out.append(CallStart(self.calls, call_id(), name))
        out.append(Arguments(self.calls, text))
        self.calls += 1
        self._held = ""  # whitespace between calls is not content
        self._after_call = True
        return True

    def json_call(self, obj: Any, out: list[Event]) -> bool:
        """A ``{"name", "arguments" | "parameters"}`` object as a call (False: it is not one)."""
        if not isinstance(obj, dict):
            return False
        return self.call(obj.get("name"), obj.get("arguments", obj.get("parameters")), out)


class MarkedParser(FamilyParser):
    """Content until ``marker``; after it, ``calls`` reads the calls, then content again."""

    marker = ""

    def __init__(self, functions: Collection[str]) -> None:
        super().__init__(functions)
        self._in_calls = False

    def calls_after_marker(self, out: list[Event], final: bool) -> bool:
        """Report what follows the marker in ``buf`` and consume it; False: wait for more (or,
        ``final``, nothing follows)."""
        raise NotImplementedError

    def scan(self, *, final: bool) -> list[Event]:
        out: list[Event] = []
        while True:
            if self._in_calls:
                if not self.calls_after_marker(out, final):
                    return out
                self._in_calls = False
                continue
            at = self.buf.find(self.marker)
            if at >= 0:
                self.content(self.buf[:at], out)
                self.buf, self._in_calls = self.buf[at + len(self.marker):], True
                continue
            keep = 0 if final else partial_suffix(self.buf, self.marker)  # may be the marker
            self.content(self.buf[:len(self.buf) - keep], out)
            self.buf = self.buf[len(self.buf) - keep:]
            return out
