"""The inproc transport's channels: a process-wide table of endpoints and the four kinds of
channel ends over bounded FIFOs.

A pipeline is a FIFO shared by its ends: ``send`` blocks while no receiver is open or its
capacity of messages waits unread; a fanout gives every subscriber its own queue and drops new
messages for a subscriber whose queue is full. Sync callers wait on Conditions, asyncio callers on
Futures completed thread-safely. Only threading and collections are imported here.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from minisgl_core.interfaces import AddressInUse, ChannelClosed
from minisgl_core.plugin.transport_util import check_size

if TYPE_CHECKING:
    import asyncio


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


class Box:
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


class Endpoint:
    """One address of the table: its kind, whether it is bound, how many ends hold it."""

    def __init__(self, kind: str, capacity: int) -> None:
        self.kind = kind  # "pipeline" or "fanout"
        self.lock = threading.Lock()
        self.bound = False
        self.refs = 0
        self.box = Box(self.lock, capacity)  # the pipeline's queue (unused by a fanout)
        self.subs: list[Box] = []  # a fanout's per-subscriber queues


_TABLE_LOCK = threading.Lock()
TABLE: dict[str, Endpoint] = {}  # every live endpoint of this process, by address


def acquire(endpoint: str, kind: str, bind: bool, capacity: int) -> Endpoint:
    """The endpoint at ``endpoint`` (made on first use), held once more; bound if ``bind``."""
    if not endpoint.startswith("inproc://"):
        raise ValueError(f"inproc endpoints start with inproc://, got {endpoint!r}")
    with _TABLE_LOCK:
        ep = TABLE.get(endpoint)
        if ep is None:
            ep = TABLE[endpoint] = Endpoint(kind, capacity)
        if ep.kind != kind:
            raise ValueError(f"{endpoint} is a {ep.kind} endpoint, not a {kind} one")
        if bind:
            if ep.bound:
                raise AddressInUse(98, f"{endpoint} is already bound")
            ep.bound = True
            ep.box.capacity = capacity
        ep.refs += 1
        return ep


def release(endpoint: str, ep: Endpoint, bound: bool) -> None:
    """Undo one ``acquire``; the last release takes the endpoint out of the table."""
    with _TABLE_LOCK:
        ep.refs -= 1
        if bound:
            ep.bound = False
        if ep.refs == 0 and TABLE.get(endpoint) is ep:
            del TABLE[endpoint]


class End:
    """What the four kinds of channel ends share: the endpoint claim and close()."""

    def __init__(self, endpoint: str, ep: Endpoint, box: Box, bind: bool, limit: int,
                 forget: Callable[[End], None]) -> None:
        self._endpoint, self._ep = endpoint, ep
        self._box, self._bind = box, bind
        self._lock = ep.lock
        self._closed = False
        self._waiting: asyncio.Future[None] | None = None
        self._limit = limit  # max_message_bytes of the transport that opened this end
        self._forget = forget  # tells that transport this end is closed

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
        release(self._endpoint, self._ep, self._bind)
        self._forget(self)

    def _closed_error(self) -> ChannelClosed:
        return ChannelClosed(f"channel {self._endpoint} is closed")

    async def _wait(self, waiters: list[asyncio.Future[None]], ready: Callable[[], bool]) -> None:
        """Wait (lock NOT held) until a peer or close() completes a future put into ``waiters``.

        ``ready`` is checked again under the lock: a peer may have acted between the caller's
        look and this one, and its wake-up went to the waiters before this future was among them.
        """
        import asyncio

        fut = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if ready():
                return
            waiters.append(fut)
            self._waiting = fut
        try:
            await fut
        finally:
            with self._lock:
                self._waiting = None
                if fut in waiters:
                    waiters.remove(fut)


class PipeSender(End):
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
            await self._wait(box.putters, box.has_room)


class _Receiver(End):
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
            await self._wait(self._box.getters, lambda: bool(self._box.items))


class PipeReceiver(_Receiver):
    def attach(self) -> None:
        """Count this receiver in (senders blocked for lack of one may go on)."""
        with self._lock:
            self._box.readers += 1
            self._box.wake_putters()

    def _detach(self) -> None:
        self._box.readers -= 1
        if self._box.readers == 0:
            self._box.items.clear()  # linger 0: unread messages die with the last receiver


class SubReceiver(_Receiver):
    def _detach(self) -> None:
        self._ep.subs.remove(self._box)


class PubSender(End):
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
