"""Helpers shared by transport implementations: the common options table and the size check."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from minisgl_core.interfaces import MessageTooLarge
from minisgl_core.plugin.registry import suggest

MIB = 1 << 20
_Options = TypeVar("_Options", bound="TransportOptions")


@dataclass(frozen=True)
class TransportOptions:
    """The ``[transports.<name>]`` keys every first-party transport understands.

    ``hwm`` is a hint, in messages, for how much a channel buffers before ``send`` blocks (a
    pipeline) or drops (a publisher); the exact depth depends on the library and kernel buffers.
    Subclasses add keys (``NetworkOptions``: tcp endpoints) by adding fields and checking their
    values in ``_check_value`` and ``_check_table``.
    """

    max_message_bytes: int = 64 * MIB  # enforced by the sender: larger messages never hit the wire
    hwm: int = 1000
    reconnect_ms: int = 50  # how soon a connecting end retries an absent peer

    @classmethod
    def from_mapping(cls: type[_Options], transport: str, options: Mapping[str, Any] | None,
                     **defaults: Any) -> _Options:
        """Build from a config table; ValueError naming the transport for unknown or bad keys."""
        table = dict(options or {})
        known = [f.name for f in dataclasses.fields(cls)]
        for key in table:
            if key not in known:
                raise ValueError(f"unknown option {key!r} for transport {transport!r};"
                                 f"{suggest(key, known)} known: {', '.join(known)}")
        values = {**defaults, **table}
        built = cls(**{key: cls._check_value(transport, key, value)
                       for key, value in values.items()})
        built._check_table(transport)
        return built

    @classmethod
    def _check_value(cls, transport: str, key: str, value: Any) -> Any:
        """The value to store for ``key``; ValueError when it is not acceptable."""
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"option {key!r} of transport {transport!r} must be a positive "
                             f"integer, got {value!r}")
        return value

    def _check_table(self, transport: str) -> None:
        """Checks that involve several keys (none here)."""


def check_size(data: bytes, limit: int) -> None:
    """Raise MessageTooLarge when ``data`` is longer than ``limit`` bytes."""
    if len(data) > limit:
        raise MessageTooLarge(f"message of {len(data)} bytes exceeds max_message_bytes={limit}")
