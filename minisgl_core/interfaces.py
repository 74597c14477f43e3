"""Protocols that plugins implement: transports and their channels, roles, frontends.

Plugins need not subclass anything; they satisfy these Protocols, and the contract suites in
``minisgl_core.testing`` check that they behave.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable


class ChannelClosed(Exception):
    """The channel was closed: raised by send after close and by a receive woken by close."""


class MessageTooLarge(ValueError):
    """A message exceeds the channel's max_message_bytes; it was never put on the wire."""


class AddressInUse(OSError):
    """A bind to an endpoint that a live channel (in any process) already has bound."""


@runtime_checkable
class Sender(Protocol):
    """The sending end of a push or pub channel. Used by one thread or one event loop."""

    def send(self, data: bytes) -> None:
        """Send one message; blocks while the peer is absent or the buffer is full."""

    async def asend(self, data: bytes) -> None:
        """Send one message without blocking the event loop."""

    def close(self) -> None:
        """Close the channel; idempotent, drops unsent data (linger 0)."""


@runtime_checkable
class Receiver(Protocol):
    """The receiving end of a pull or sub channel. Used by one thread or one event loop."""

    def recv(self, timeout: float | None = None) -> bytes:
        """Wait for one message; TimeoutError after ``timeout`` seconds, ChannelClosed on close."""

    def recv_nowait(self) -> bytes | None:
        """Return one message if one is ready, else None; never blocks."""

    async def arecv(self) -> bytes:
        """Wait for one message without blocking the event loop; ChannelClosed on close."""

    def close(self) -> None:
        """Close the channel; idempotent; wakes a blocked recv/arecv with ChannelClosed."""


@runtime_checkable
class Transport(Protocol):
    """A way to move bytes between threads or processes, selected by name (``--transport``)."""

    name: ClassVar[str]
    multiprocess: ClassVar[bool]  # False for transports that only work inside one process

    def endpoint(self, run_dir: Path, channel: str) -> str:
        """Return the address of ``channel`` for a run whose private directory is ``run_dir``."""

    def push(self, endpoint: str, *, bind: bool = False) -> Sender:
        """Open the sending end of a pipeline (many senders -> one receiver, nothing dropped)."""

    def pull(self, endpoint: str, *, bind: bool = True) -> Receiver:
        """Open the receiving end of a pipeline."""

    def pub(self, endpoint: str, *, bind: bool = True) -> Sender:
        """Open a best-effort fan-out publisher (may drop; never for data that must arrive)."""

    def sub(self, endpoint: str, *, bind: bool = False) -> Receiver:
        """Open a subscriber to a publisher; receives everything published after it joined."""

    def close(self) -> None:
        """Close every channel this transport opened; idempotent."""


# Callable[[Mapping[str, Any]], Transport]: called with its [transports.<name>] table
TransportFactory = Any


class Frontend(Protocol):
    """A server that takes client requests and talks to the engine through an EngineClient."""

    async def serve(self) -> None:
        """Serve until ``shutdown`` is called."""

    async def shutdown(self) -> None:
        """Stop accepting requests and make ``serve`` return."""


OptionsTable = Mapping[str, Any]
