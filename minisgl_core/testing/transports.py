"""Helpers for testing transports: lookup by name, bounded waits, spawned peer processes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from minisgl_core.interfaces import Receiver, Sender, Transport

if TYPE_CHECKING:
    from minisgl_core.plugin.registry import Registries

T = TypeVar("T")


def _registries(plugins: Sequence[str] | None) -> Registries:
    from minisgl_core.plugin.loading import build_manager, collect

    return collect(build_manager(autoload=plugins is None, extra=list(plugins or ())))


def transport_factory(name: str, plugins: Sequence[str] | None = None) -> Callable[..., Transport]:
    """The registered factory of transport ``name``.

    ``plugins`` lists plugin modules to load (entry points are then not scanned, which keeps a
    test independent of what else is installed); None loads every installed entry point.
    """
    factory: Callable[..., Transport] = _registries(plugins).transports.get(name)
    return factory


def make_transport(name: str, plugins: Sequence[str] | None = None,
                   options: Mapping[str, Any] | None = None) -> Transport:
    """Build transport ``name`` through the plugin registry with its options table."""
    return transport_factory(name, plugins)(dict(options or {}))


def write_transport_keys(name: str, plugins: Sequence[str] | None, root: Path) -> Path:
    """Write transport ``name``'s keys under ``root`` as ``minisgl keys new root`` does."""
    from minisgl_core.plugin.transport_tcp import write_all_keys

    write_all_keys(_registries(plugins), root, [name])
    return root


def run_async(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    """Run ``coro`` in a fresh event loop, failing with TimeoutError after ``timeout`` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def wait_until_stalled(count: Callable[[], int], *, cap: int, stall: float = 0.3,
                       deadline: float = 30.0) -> int:
    """Wait until ``count()`` stops growing for ``stall`` seconds and return it.

    Fails (AssertionError) if it exceeds ``cap`` first, i.e. a sender kept buffering without
    bound, or if it never settles within ``deadline`` seconds.
    """
    end = time.monotonic() + deadline
    last, since = -1, time.monotonic()
    while time.monotonic() < end:
        now = count()
        assert now <= cap, f"sender still accepting after {now} messages (cap {cap}): unbounded"
        if now != last:
            last, since = now, time.monotonic()
        elif now > 0 and time.monotonic() - since >= stall:
            return now
        time.sleep(0.02)
    raise AssertionError(f"sender neither blocked nor hit the cap in {deadline} s ({last} sent)")


class Pump(threading.Thread):
    """A thread sending numbered ``size``-byte messages until stopped, closed or failed."""

    def __init__(self, sender: Sender, size: int = 1024) -> None:
        super().__init__(daemon=True)
        self.sender, self.size = sender, size
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        pad = b"x" * max(0, self.size - 8)
        try:
            while not self.stop.is_set():
                self.sender.send(self.sent.to_bytes(8, "little") + pad)
                self.sent += 1
        except BaseException as exc:  # recorded for the test to inspect
            self.error = exc


def seq(data: bytes) -> int:
    """The sequence number a Pump put in front of a message."""
    return int.from_bytes(data[:8], "little")


def handshake(pub: Sender, subs: Sequence[Receiver], timeout: float = 10.0) -> None:
    """Publish probes until every subscriber has received one (the slow-joiner cure)."""
    pending = list(subs)
    end = time.monotonic() + timeout
    while pending:
        assert time.monotonic() < end, "subscribers never saw a probe"
        pub.send(b"probe")
        for sub in list(pending):
            try:
                if sub.recv(timeout=0.02) == b"probe":
                    pending.remove(sub)
            except TimeoutError:
                pass


def recv_data(rx: Receiver, timeout: float = 10.0) -> bytes:
    """Receive the next message that is not a handshake probe."""
    while True:
        msg = rx.recv(timeout=timeout)
        if msg != b"probe":
            return msg


def child_push(name: str, plugins: Sequence[str] | None, options: Mapping[str, Any],
               endpoint: str, sender_id: int, count: int, use_async: bool, done: Any) -> None:
    """Spawned-process body: send ``count`` tagged messages, then wait for ``done`` (an Event).

    Waiting before close matters: with linger 0, closing drops whatever is still queued.
    """
    transport = make_transport(name, plugins, options)
    tx = transport.push(endpoint)
    try:
        messages = [f"{sender_id}:{i}".encode() for i in range(count)]
        if use_async:

            async def send_all() -> None:
                for msg in messages:
                    await tx.asend(msg)

            run_async(send_all())
        else:
            for msg in messages:
                tx.send(msg)
        done.wait(60)
    finally:
        tx.close()
        transport.close()
