"""zmq channel ends: non-blocking socket calls plus readiness waits that close() can interrupt.

A zmq socket must not be touched by two threads at once, yet close() has to wake a receive
blocked in another thread. So every operation marks the channel busy; close() from another
thread writes to a wake pipe (which every wait also polls) and lets the busy thread close the
socket on its way out. Async operations never park a native receive: they try ``NOBLOCK``
first and only when that fails wait for the socket's FD through the event loop, so cancelling
an ``arecv`` (e.g. by ``asyncio.wait_for``) can never lose a message, and a busy receiver
drains without one await per message (per-message ``zmq.asyncio`` awaits run at ~6% of sync).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from minisgl_core.api import ChannelClosed, check_size

_COPY_THRESHOLD = 65536  # below this pyzmq copies anyway; above it zero-copy pays off

# zmq's bind silently takes over a live ipc path, so binds are checked first; this lock makes
# check-then-bind (and unlink-then-close) atomic between the threads of one process.
BIND_LOCK = threading.Lock()


class _Channel:
    def __init__(self, sock: zmq.Socket[bytes], endpoint: str, limit: int,
                 on_close: Callable[[_Channel], None], events: int) -> None:
        self._sock = sock
        self._fd: int = sock.getsockopt(zmq.FD)
        self.endpoint = endpoint
        self._limit = limit
        self._on_close = on_close
        self._events = events  # POLLIN for receivers, POLLOUT for senders
        self._state = threading.Lock()
        self._closed = False
        self._busy_thread: int | None = None
        self._left = threading.Event()  # set when a busy operation has seen the close
        self._torn_down = False
        self._async_wait: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        self.bound_file: tuple[str, int, int] | None = None  # (path, st_dev, st_ino) we bound
        self.bound_tcp: tuple[str, int] | None = None  # (host, port) we bound
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poller = zmq.Poller()
        self._poller.register(sock, events)
        self._poller.register(self._wake_r, zmq.POLLIN)

    # ---- busy / close bookkeeping -----------------------------------------------------------

    def _enter(self) -> None:
        with self._state:
            if self._closed:
                raise ChannelClosed(f"channel {self.endpoint} is closed")
            self._busy_thread = threading.get_ident()

    def _leave(self) -> None:
        with self._state:
            self._busy_thread = None
            closed = self._closed
        if closed:
            self._teardown()
            self._left.set()

    def _check_open(self) -> None:
        if self._closed:
            raise ChannelClosed(f"channel {self.endpoint} is closed")

    def _translate(self, exc: zmq.ZMQError) -> Exception:
        """A zmq error seen because the socket or context went away means: closed."""
        if self._closed or exc.errno in (zmq.ETERM, zmq.ENOTSOCK):
            return ChannelClosed(f"channel {self.endpoint} is closed")
        return exc

    def close(self) -> None:
        """Idempotent; wakes a blocked operation in any thread or task with ChannelClosed."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            busy = self._busy_thread
            waiter = self._async_wait
        if busy is None:
            self._teardown()
        elif busy == threading.get_ident():
            # An async operation of this very thread is suspended in its await: nothing touches
            # the socket now, so unhook it from the loop, wake it, and close at once.
            if waiter is not None:
                loop, fut = waiter
                loop.remove_reader(self._fd)
                loop.remove_reader(self._wake_r)
                if not fut.done():
                    fut.set_result(None)
            self._teardown()
        else:
            with self._state:  # under the lock: the owner may be tearing down (closing the pipe)
                if not self._torn_down:
                    os.write(self._wake_w, b"x")  # stays readable: later waits return at once
            if not self._left.wait(5.0):
                self._teardown()  # the owner never came back (its loop stopped): close anyway

    def _teardown(self) -> None:
        with self._state:
            if self._torn_down:
                return
            self._torn_down = True
        if self.bound_file is not None:
            # zmq closes a listener asynchronously and leaves its file behind. Unlinking first
            # makes the endpoint free the moment close() returns, and leaves nothing in run_dir.
            path, dev, ino = self.bound_file
            with BIND_LOCK:
                try:
                    st = os.stat(path)
                    if (st.st_dev, st.st_ino) == (dev, ino):
                        os.unlink(path)
                except OSError:
                    pass
        self._sock.close(linger=0)
        if self.bound_tcp is not None:
            _wait_port_free(*self.bound_tcp)
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._on_close(self)

    # ---- waiting ----------------------------------------------------------------------------

    def _poll(self, deadline: float | None) -> None:
        """Block until the socket may be ready, close() was called, or ``deadline`` passed."""
        if deadline is None:
            self._poller.poll(-1)
        else:
            ms = max(0.0, deadline - time.monotonic()) * 1000
            self._poller.poll(int(ms) + 1)
        self._check_open()

    async def _await_ready(self) -> None:
        """Wait through the running loop until the socket FD or the wake pipe is readable."""
        if self._sock.getsockopt(zmq.EVENTS) & self._events:
            return  # the edge already fired; the FD would not signal again
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(self._fd, ready)
        loop.add_reader(self._wake_r, ready)
        self._async_wait = (loop, fut)
        try:
            await fut
        finally:
            self._async_wait = None
            if not self._torn_down:
                loop.remove_reader(self._fd)
                loop.remove_reader(self._wake_r)
        self._check_open()


class ZmqSender(_Channel):
    """The sending end of a PUSH or PUB socket."""

    def send(self, data: bytes) -> None:
        check_size(data, self._limit)
        self._enter()
        try:
            while not self._try_send(data):
                self._poll(None)
        except zmq.ZMQError as exc:
            raise self._translate(exc) from exc
        finally:
            self._leave()

    async def asend(self, data: bytes) -> None:
        check_size(data, self._limit)
        self._enter()
        try:
            while not self._try_send(data):
                await self._await_ready()
        except zmq.ZMQError as exc:
            raise self._translate(exc) from exc
        finally:
            self._leave()

    def _try_send(self, data: bytes) -> bool:
        """Queue ``data`` without blocking; False when the socket has no room (or no peer)."""
        try:
            self._sock.send(data, zmq.NOBLOCK, copy=len(data) < _COPY_THRESHOLD)
        except zmq.Again:
            return False
        return True


class ZmqReceiver(_Channel):
    """The receiving end of a PULL or SUB socket."""

    def _try_recv(self) -> bytes | None:
        """The next message, or None if none is queued: asked of the socket's events first,
        since a receive that finds nothing raises (zmq.Again), which costs a caller that polls
        once a step more than the check."""
        if not self._sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            return None
        try:
            return self._sock.recv(zmq.NOBLOCK)
        except zmq.Again:  # cannot happen with one reader; kept for safety
            return None

    def recv(self, timeout: float | None = None) -> bytes:
        self._enter()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if (data := self._try_recv()) is not None:
                    return data
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"no message on {self.endpoint} within {timeout} s")
                self._poll(deadline)
        except zmq.ZMQError as exc:
            raise self._translate(exc) from exc
        finally:
            self._leave()

    def recv_nowait(self) -> bytes | None:
        self._enter()
        try:
            return self._try_recv()
        except zmq.ZMQError as exc:
            raise self._translate(exc) from exc
        finally:
            self._leave()

    async def arecv(self) -> bytes:
        self._enter()
        try:
            while (data := self._try_recv()) is None:
                await self._await_ready()
            return data
        except zmq.ZMQError as exc:
            raise self._translate(exc) from exc
        finally:
            self._leave()


def _wait_port_free(host: str, port: int, limit: float = 1.0) -> None:
    """zmq closes listeners in its I/O thread; wait (bounded) until the port can be bound again
    so that close() really frees the endpoint for the next bind. A bind probe, not a connect:
    a connection would reach the closing listener and look like a stray peer in its monitor."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    end = time.monotonic() + limit
    while time.monotonic() < end:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as zmq's listener
            try:
                probe.bind((host, port))
                return
            except OSError:
                pass
        time.sleep(0.002)


def socket_options(kind: int, *, bind: bool, hwm: int, limit: int,
                   reconnect_ms: int) -> dict[int, Any]:
    """The options every minisgl zmq socket gets (see docs/transports.md for the why)."""
    opts: dict[int, Any] = {
        zmq.LINGER: 0,  # the default (-1) makes close/term hang on undelivered messages
        zmq.SNDHWM: hwm,
        zmq.RCVHWM: hwm,
        zmq.RECONNECT_IVL: reconnect_ms,
    }
    if kind in (zmq.PULL, zmq.SUB):
        # The sender already refuses anything bigger; zmq disconnects a peer that sends more.
        opts[zmq.MAXMSGSIZE] = limit
    if not bind:
        # Queue only on live connections, so nothing strands on a peer that is not up yet.
        opts[zmq.IMMEDIATE] = 1
    return opts
