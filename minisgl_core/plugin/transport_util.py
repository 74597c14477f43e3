"""Helpers shared by transport implementations: the common options table and the size check."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from minisgl_core.interfaces import MessageTooLarge
from minisgl_core.plugin.registry import suggest

MIB = 1 << 20


@dataclass(frozen=True)
class TransportOptions:
    """The ``[transports.<name>]`` keys every first-party transport understands.

    ``hwm`` is a hint, in messages, for how much a channel buffers before ``send`` blocks (a
    pipeline) or drops (a publisher); the exact depth depends on the library and kernel buffers.
    """

    max_message_bytes: int = 64 * MIB  # enforced by the sender: larger messages never hit the wire
    hwm: int = 1000
    reconnect_ms: int = 50  # how soon a connecting end retries an absent peer

    @classmethod
    def from_mapping(cls, transport: str, options: Mapping[str, Any] | None,
                     **defaults: int) -> TransportOptions:
        """Build from a config table; ValueError naming the transport for unknown or bad keys."""
        table = dict(options or {})
        known = [f.name for f in dataclasses.fields(cls)]
        for key in table:
            if key not in known:
                raise ValueError(f"unknown option {key!r} for transport {transport!r};"
                                 f"{suggest(key, known)} known: {', '.join(known)}")
        values = {**defaults, **table}
        for key, value in values.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"option {key!r} of transport {transport!r} must be a positive "
                                 f"integer, got {value!r}")
        return cls(**values)


def check_size(data: bytes, limit: int) -> None:
    """Raise MessageTooLarge when ``data`` is longer than ``limit`` bytes."""
    if len(data) > limit:
        raise MessageTooLarge(f"message of {len(data)} bytes exceeds max_message_bytes={limit}")
