"""What a tool-call parser reports: plain content, the start of a call, more of its arguments."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


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


def call_id() -> str:
    """A fresh call id, OpenAI's way (``call_`` and 24 hex digits)."""
    return f"call_{uuid.uuid4().hex[:24]}"


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that begins ``tag`` (held back, it may be it)."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
