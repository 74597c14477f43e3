"""Default plugin: the ``inproc`` transport, threads and asyncio tasks inside one process.

Endpoints (``inproc://<run_dir>/<channel>``) live in a process-wide table, so every
``InprocTransport`` of a process reaches the same channels, as the processes of a service would.
A pipeline is a bounded FIFO shared by its ends: ``send`` blocks while no receiver is open or
``hwm`` messages wait unread; a publisher gives every subscriber its own ``hwm``-deep queue and
drops new messages for a subscriber whose queue is full. Only threading and collections are
imported here, so the plugin stays cheap to load.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from minisgl_core.interfaces import AddressInUse, ChannelClosed
from minisgl_core.plugin.hookspecs import Register, hookimpl
from minisgl_core.plugin.transport_util import TransportOptions, check_size
from minisgl_core.service.rundir import check_channel

if TYPE_CHECKING:
    import asyncio

__all__ = ["InprocTransport"]


@hookimpl
def minisgl_register_transports(register: Register) -> None:
    register("inproc", "minisgl_core.default_plugins.inproc:InprocTransport")


def _set_none(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wake(fut: asyncio.Future[None]) -> None:
    """Complete ``fut`` from any thread: directly on its own loop's thread, else thread-safely."""
    loop = fut.get_loop()
    if sys.modules["asyncio"]._get_running_loop() is loop:
        _set_none(fut)
    else:
        try:
            loop.call_soon_threadsafe(_set_none, fut)
        except RuntimeError:  # that loop is closed: nobody is waiting any more
            pass


def _wake_all(waiting: list[asyncio.Future[None]]) -> list[asyncio.Future[None]]:
    """Wake every waiter; the (empty) list of those still waiting."""
    for fut in waiting:
        _wake(fut)
    return []


class _Box:
    """A FIFO guarded by its endpoint's lock, with sync (Condition) and async (Future) waiters."""

    def __init__(self, lock: threading.Lock, capacity: int) -> None:
        self.not_empty = threading.Condition(lock)
        self.not_full = threading.Condition(lock)
        self.items: deque[bytes] = deque()
        self.capacity = capacity
        self.readers = 0
        self.getters: list[asyncio.Future[None]] = []
        self.putters: list[asyncio.Future[None]] = []

    def wake_getters(self) -> None:
        self.not_empty.notify_all()
        self.getters = _wake_all(self.getters)

    def wake_putters(self) -> None:
        self.not_full.notify_all()
        self.putters = _wake_all(self.putters)

    def has_room(self) -> bool:
        return self.readers > 0 and len(self.items) < self.capacity


class _Endpoint:
    def __init__(self, kind: str, capacity: int) -> None:
        self.kind = kind  # "pipeline" or "fanout"
        self.lock = threading.Lock()
        self.bound = False
        self.refs = 0
        self.box = _Box(self.lock, capacity)  # the pipeline's queue (unused by a fanout)
        self.subs: list[_Box] = []  # a fanout's per-subscriber queues


_TABLE_LOCK = threading.Lock()
_TABLE: dict[str, _Endpoint] = {}


def _acquire(endpoint: str, kind: str, bind: bool, capacity: int) -> _Endpoint:
    if not endpoint.startswith("inproc://"):
        raise ValueError(f"inproc endpoints start with inproc://, got {endpoint!r}")
    with _TABLE_LOCK:
        ep = _TABLE.get(endpoint)
        if ep is None:
            ep = _TABLE[endpoint] = _Endpoint(kind, capacity)
        if ep.kind != kind:
            raise ValueError(f"{endpoint} is a {ep.kind} endpoint, not a {kind} one")
        if bind:
            if ep.bound:
                raise AddressInUse(98, f"{endpoint} is already bound")
            ep.bound = True
            ep.box.capacity = capacity
        ep.refs += 1
        return ep


def _release(endpoint: str, ep: _Endpoint, bound: bool) -> None:
    with _TABLE_LOCK:
        ep.refs -= 1
        if bound:
            ep.bound = False
        if ep.refs == 0 and _TABLE.get(endpoint) is ep:
            del _TABLE[endpoint]


class _End:
    """What the four kinds of channel ends share: the endpoint claim and close()."""

    def __init__(self, owner: InprocTransport, endpoint: str, ep: _Endpoint, box: _Box,
                 bind: bool) -> None:
        self._owner, self._endpoint, self._ep = owner, endpoint, ep
        self._box, self._bind = box, bind
        self._lock = ep.lock
        self._closed = False
        self._waiting: asyncio.Future[None] | None = None
        self._limit = owner.options.max_message_bytes

    def _detach(self) -> None:
        """Undo what opening did; called with the endpoint lock held."""

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._detach()
            self._box.not_empty.notify_all()  # wake this end if it is blocked
            self._box.not_full.notify_all()
            if self._waiting is not None:
                _wake(self._waiting)
        _release(self._endpoint, self._ep, self._bind)
        self._owner._forget(self)

    def _closed_error(self) -> ChannelClosed:
        return ChannelClosed(f"channel {self._endpoint} is closed")

    async def _wait(self, waiters: list[asyncio.Future[None]]) -> None:
        """Wait (lock NOT held) until a peer or close() completes a future put into ``waiters``."""
        import asyncio

        fut = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._closed:
                raise self._closed_error()
            waiters.append(fut)
            self._waiting = fut
        try:
            await fut
        finally:
            with self._lock:
                self._waiting = None
                if fut in waiters:
                    waiters.remove(fut)


class _PipeSender(_End):
    def send(self, data: bytes) -> None:
        check_size(data, self._limit)
        box = self._box
        with self._lock:
            while True:
                if self._closed:
                    raise self._closed_error()
                if box.has_room():
                    box.items.append(bytes(data))
                    box.wake_getters()
                    return
                box.not_full.wait()

    async def asend(self, data: bytes) -> None:
        check_size(data, self._limit)
        box = self._box
        while True:
            with self._lock:
                if self._closed:
                    raise self._closed_error()
                if box.has_room():
                    box.items.append(bytes(data))
                    box.wake_getters()
                    return
            await self._wait(box.putters)


class _Receiver(_End):
    def _take(self) -> bytes | None:
        """Pop one message (lock held); raise ChannelClosed if closed."""
        if self._closed:
            raise self._closed_error()
        box = self._box
        if box.items:
            item = box.items.popleft()
            box.wake_putters()
            return item
        return None

    def recv(self, timeout: float | None = None) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                item = self._take()
                if item is not None:
                    return item
                if deadline is None:
                    self._box.not_empty.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no message on {self._endpoint} within {timeout} s")
                self._box.not_empty.wait(remaining)

    def recv_nowait(self) -> bytes | None:
        with self._lock:
            return self._take()

    async def arecv(self) -> bytes:
        while True:
            with self._lock:
                item = self._take()
                if item is not None:
                    return item
            await self._wait(self._box.getters)


class _PipeReceiver(_Receiver):
    def _attach(self) -> None:
        with self._lock:
            self._box.readers += 1
            self._box.wake_putters()  # senders blocked for lack of a receiver may go on

    def _detach(self) -> None:
        self._box.readers -= 1
        if self._box.readers == 0:
            self._box.items.clear()  # linger 0: unread messages die with the last receiver


class _SubReceiver(_Receiver):
    def _detach(self) -> None:
        self._ep.subs.remove(self._box)


class _PubSender(_End):
    def send(self, data: bytes) -> None:
        check_size(data, self._limit)
        data = bytes(data)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            for box in self._ep.subs:
                if len(box.items) < box.capacity:  # full: drop for that subscriber, never block
                    box.items.append(data)
                    box.wake_getters()

    async def asend(self, data: bytes) -> None:
        self.send(data)


class InprocTransport:
    """Channels between threads and asyncio tasks of one process (``multiprocess = False``)."""

    name: ClassVar[str] = "inproc"
    multiprocess: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = TransportOptions.from_mapping(self.name, options)
        self._ends: set[_End] = set()
        self._lock = threading.Lock()
        self._closed = False

    def endpoint(self, run_dir: Path, channel: str) -> str:
        return f"inproc://{Path(run_dir).absolute()}/{check_channel(channel)}"

    def _open(self, cls: type[_End], endpoint: str, kind: str, bind: bool) -> Any:
        with self._lock:
            if self._closed:
                raise ChannelClosed("transport inproc is closed")
        ep = _acquire(endpoint, kind, bind, self.options.hwm)
        box = ep.box
        if cls is _SubReceiver:
            box = _Box(ep.lock, self.options.hwm)
            with ep.lock:
                box.readers = 1
                ep.subs.append(box)
        end = cls(self, endpoint, ep, box, bind)
        if isinstance(end, _PipeReceiver):
            end._attach()
        with self._lock:
            self._ends.add(end)
        return end

    def push(self, endpoint: str, *, bind: bool = False) -> _PipeSender:
        return self._open(_PipeSender, endpoint, "pipeline", bind)  # type: ignore[no-any-return]

    def pull(self, endpoint: str, *, bind: bool = True) -> _PipeReceiver:
        return self._open(_PipeReceiver, endpoint, "pipeline", bind)  # type: ignore[no-any-return]

    def pub(self, endpoint: str, *, bind: bool = True) -> _PubSender:
        return self._open(_PubSender, endpoint, "fanout", bind)  # type: ignore[no-any-return]

    def sub(self, endpoint: str, *, bind: bool = False) -> _SubReceiver:
        return self._open(_SubReceiver, endpoint, "fanout", bind)  # type: ignore[no-any-return]

    def _forget(self, end: _End) -> None:
        with self._lock:
            self._ends.discard(end)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ends, self._ends = list(self._ends), set()
        for end in ends:
            end.close()
