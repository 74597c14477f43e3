"""The two ends of the transport benchmark: the echo/stream peer and the measuring loops.

Wire protocol between the two, on two push/pull channels (each side binds its own inbox):
``P...`` ping (echoed back as is), ``T<size>`` stream ``size``-byte messages until ``S``, then
send ``E``; ``Q`` quits. The peer is always synchronous; the measuring side is sync or async.
"""

from __future__ import annotations

import asyncio
import queue
import select
import socket
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from minisgl_core.interfaces import Receiver, Sender

READY, PING, STREAM, STOP, END, QUIT = b"R", b"P", b"T", b"S", b"E", b"Q"
MAX_ROUND_TRIPS = 5000
WARMUP_ROUND_TRIPS = 20


@dataclass(frozen=True)
class Measured:
    """One case's numbers: one-way latency from ping-pong (RTT/2) and one-way throughput."""

    p50_us: float
    p99_us: float
    round_trips: int
    msgs_per_s: float
    mb_per_s: float


def peer_loop(rx: Receiver, tx: Sender) -> None:
    """Serve pings and streams until QUIT (or the channel closes)."""
    tx.send(READY)
    while True:
        msg = rx.recv()
        op = msg[:1]
        if op == PING:
            tx.send(msg)
        elif op == STREAM:
            size = int.from_bytes(msg[1:9], "little")
            payload = b"D" * size
            every = max(1, min(64, (1 << 20) // max(size, 1)))  # look for STOP ~every MiB
            n = 0
            while True:
                tx.send(payload)
                n += 1
                if n % every == 0 and rx.recv_nowait() == STOP:
                    break
            tx.send(END)
        elif op == QUIT:
            return


def peer_process(name: str, plugins: Sequence[str], options: Mapping[str, Any],
                 down: str, up: str) -> None:
    """Spawned-process body: the peer of transport ``name``; binds ``down``, connects ``up``."""
    from minisgl_core.testing.transports import make_transport

    transport = make_transport(name, plugins, options)
    try:
        peer_loop(transport.pull(down, bind=True), transport.push(up))
    finally:
        transport.close()


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _summarize(rtts_ns: list[int], count: int, elapsed: float, size: int) -> Measured:
    one_way = sorted(r / 2000 for r in rtts_ns)  # RTT ns -> one-way us
    rate = count / elapsed if elapsed > 0 else 0.0
    return Measured(statistics.median(one_way), _percentile(one_way, 0.99), len(one_way), rate,
                    rate * size / 1e6)


def measure_sync(tx: Sender, rx: Receiver, size: int, budget: float) -> Measured:
    """Ping-pong for ~40% of ``budget`` seconds, then count a stream for the rest."""
    ping = PING + b"p" * (size - 1)
    for _ in range(WARMUP_ROUND_TRIPS):
        tx.send(ping)
        rx.recv(timeout=30)
    rtts: list[int] = []
    end = time.perf_counter() + 0.4 * budget
    while len(rtts) < MAX_ROUND_TRIPS and time.perf_counter() < end:
        t0 = time.perf_counter_ns()
        tx.send(ping)
        rx.recv(timeout=30)
        rtts.append(time.perf_counter_ns() - t0)
    tx.send(STREAM + size.to_bytes(8, "little"))
    rx.recv(timeout=30)  # the first message starts the clock
    count, start = 0, time.perf_counter()
    end = start + 0.6 * budget
    while (now := time.perf_counter()) < end:
        rx.recv(timeout=30)
        count += 1
    tx.send(STOP)
    while rx.recv(timeout=30) != END:
        pass
    return _summarize(rtts, count, now - start, size)


async def _measure_async(tx: Sender, rx: Receiver, size: int, budget: float) -> Measured:
    ping = PING + b"p" * (size - 1)
    for _ in range(WARMUP_ROUND_TRIPS):
        await tx.asend(ping)
        await rx.arecv()
    rtts: list[int] = []
    end = time.perf_counter() + 0.4 * budget
    while len(rtts) < MAX_ROUND_TRIPS and time.perf_counter() < end:
        t0 = time.perf_counter_ns()
        await tx.asend(ping)
        await rx.arecv()
        rtts.append(time.perf_counter_ns() - t0)
    await tx.asend(STREAM + size.to_bytes(8, "little"))
    await rx.arecv()
    count, start = 0, time.perf_counter()
    end = start + 0.6 * budget
    while (now := time.perf_counter()) < end:
        await rx.arecv()
        count += 1
    await tx.asend(STOP)
    while await rx.arecv() != END:
        pass
    return _summarize(rtts, count, now - start, size)


def measure_async(tx: Sender, rx: Receiver, size: int, budget: float) -> Measured:
    """``measure_sync`` with ``asend``/``arecv`` on the measuring side, in a fresh event loop."""

    async def bounded() -> Measured:
        return await asyncio.wait_for(_measure_async(tx, rx, size, budget), budget + 60)

    return asyncio.run(bounded())


class QueueSender:
    """A ``multiprocessing.Queue`` behind the Sender protocol (the baseline; sync only)."""

    def __init__(self, q: Any) -> None:
        self._q = q

    def send(self, data: bytes) -> None:
        self._q.put(data)

    async def asend(self, data: bytes) -> None:
        raise NotImplementedError("multiprocessing.Queue has no async side")

    def close(self) -> None:
        pass


class QueueReceiver:
    """A ``multiprocessing.Queue`` behind the Receiver protocol."""

    def __init__(self, q: Any) -> None:
        self._q = q

    def recv(self, timeout: float | None = None) -> bytes:
        try:
            return self._q.get(timeout=timeout)  # type: ignore[no-any-return]
        except queue.Empty:
            raise TimeoutError("no message") from None

    def recv_nowait(self) -> bytes | None:
        try:
            return self._q.get_nowait()  # type: ignore[no-any-return]
        except queue.Empty:
            return None

    async def arecv(self) -> bytes:
        raise NotImplementedError("multiprocessing.Queue has no async side")

    def close(self) -> None:
        pass


def queue_peer_process(down: Any, up: Any) -> None:
    """Spawned-process body of the ``multiprocessing.Queue`` baseline's peer."""
    peer_loop(QueueReceiver(down), QueueSender(up))


class StreamSender:
    """Length-prefixed frames on a connected stream socket (the raw-socket baseline; sync)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send(self, data: bytes) -> None:
        head = len(data).to_bytes(4, "little")
        if len(data) < 65536:  # one syscall; a large frame is not worth copying for that
            self._sock.sendall(head + data)
        else:
            self._sock.sendall(head)
            self._sock.sendall(data)

    async def asend(self, data: bytes) -> None:
        raise NotImplementedError("the raw-socket baseline has no async side")

    def close(self) -> None:
        self._sock.close()


class StreamReceiver:
    """The receiving side of ``StreamSender``: each frame read straight into its own buffer."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def _exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise EOFError("the peer closed the socket")
            got += k
        return buf

    def recv(self, timeout: float | None = None) -> bytes:
        if not select.select([self._sock], [], [], timeout)[0]:
            raise TimeoutError("no message")
        return bytes(self._exact(int.from_bytes(self._exact(4), "little")))

    def recv_nowait(self) -> bytes | None:
        try:
            return self.recv(0)
        except TimeoutError:
            return None

    async def arecv(self) -> bytes:
        raise NotImplementedError("the raw-socket baseline has no async side")

    def close(self) -> None:
        self._sock.close()


def socket_peer_process(family: int, address: Any) -> None:
    """Spawned-process body of the raw-socket baseline's peer: one connection, both ways."""
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.connect(address)
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as zmq and nng do
        peer_loop(StreamReceiver(sock), StreamSender(sock))
