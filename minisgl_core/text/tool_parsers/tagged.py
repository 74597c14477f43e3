"""Calls in tagged blocks of free text: Hermes / Qwen's ``<tool_call>{json}</tool_call>`` and
Qwen3-Coder's ``<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>``.

A block whose body is not a call of a known function is content, tags and all.
"""

from __future__ import annotations

import json
import re
from typing import Any

from minisgl_core.text.tool_parsers.base import MarkedParser
from minisgl_core.text.tool_parsers.events import Event

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.S)


class TaggedParser(MarkedParser):
    """Blocks between ``OPEN`` and ``CLOSE``; ``block`` turns a body into calls."""

    marker = OPEN

    def block(self, body: str, out: list[Event]) -> bool:
        """Report the calls of one block's body (False: it is not a call)."""
        raise NotImplementedError

    def calls_after_marker(self, out: list[Event], final: bool) -> bool:
        at = self.buf.find(CLOSE)
        if at < 0 and not final:
            return False
        body = self.buf if at < 0 else self.buf[:at]
        self.buf = "" if at < 0 else self.buf[at + len(CLOSE):]
        if not self.block(body, out):
            self.content(OPEN + body + ("" if at < 0 else CLOSE), out)
        return at >= 0


class HermesParser(TaggedParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen 2.5 / 3)."""

    name = "hermes"

    def block(self, body: str, out: list[Event]) -> bool:
        try:
            call = json.loads(body.strip())
        except ValueError:
            return False
        return self.json_call(call, out)


class Qwen3CoderParser(TaggedParser):
    """``<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>``;
    a value is JSON when its parameter's schema says it is not a string."""

    name = "qwen3_coder"

    def block(self, body: str, out: list[Event]) -> bool:
        found = list(_FUNCTION.finditer(body))
        if not found or any(m.group(1).strip() not in self.functions for m in found):
            return False
        for m in found:
            name = m.group(1).strip()
            properties = (self.schemas.get(name) or {}).get("properties") or {}
            arguments = {p.group(1).strip(): _value(p.group(2), properties.get(
                p.group(1).strip()) or {}) for p in _PARAMETER.finditer(m.group(2))}
            self.call(name, arguments, out)
        return True


def _value(raw: str, schema: dict[str, Any]) -> Any:
    # the template writes each value on lines of its own: the newlines around it are not in it
    text = raw.removeprefix("\n").removesuffix("\n")
    kind = schema.get("type")
    if kind == "string" or (kind is None and "enum" not in schema):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text  # not what the schema says: handed over as written
