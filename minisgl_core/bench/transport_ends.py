"""The peers ``minisgl bench transport`` measures against, each started as a context manager
that hands the measuring side its (to-peer, from-peer) ends: a transport's peer (a spawned
process, or a thread for in-process transports), the ``multiprocessing.Queue`` baseline's and
the raw socket's (the host's own ceiling)."""

from __future__ import annotations

import multiprocessing
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from minisgl_core.bench.transport_peer import (
    QUIT,
    READY,
    QueueReceiver,
    QueueSender,
    StreamReceiver,
    StreamSender,
    peer_loop,
    peer_process,
    queue_peer_process,
    socket_peer_process,
)
from minisgl_core.interfaces import Receiver, Sender
from minisgl_core.service.rundir import private_run_dir


@contextmanager
def transport_peer(name: str, plugins: list[str], options: dict[str, Any],
                   multiprocess: bool) -> Iterator[tuple[Sender, Receiver]]:
    """Start the peer of ``name`` and yield the measuring side's (to-peer, from-peer) ends."""
    from minisgl_core.testing.transports import make_transport

    transport = make_transport(name, plugins, options)
    proc: Any = None
    thread: threading.Thread | None = None
    with private_run_dir(prefix="mb-") as run_dir:
        down, up = transport.endpoint(run_dir, "down"), transport.endpoint(run_dir, "up")
        try:
            rx = transport.pull(up, bind=True)
            if multiprocess:
                ctx = multiprocessing.get_context("spawn")
                proc = ctx.Process(target=peer_process, args=(name, plugins, options, down, up),
                                   daemon=True)
                proc.start()
            else:
                peer = make_transport(name, plugins, options)
                thread = threading.Thread(target=_thread_peer, args=(peer, down, up), daemon=True)
                thread.start()
            if rx.recv(timeout=120) != READY:
                raise RuntimeError(f"peer of {name} did not start")
            tx = transport.push(down)
            yield tx, rx
            tx.send(QUIT)
        finally:
            if proc is not None:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
            if thread is not None:
                thread.join(10)
            transport.close()


def _thread_peer(transport: Any, down: str, up: str) -> None:
    try:
        peer_loop(transport.pull(down, bind=True), transport.push(up))
    finally:
        transport.close()


@contextmanager
def _ready_peer(proc: Any, tx: Sender, rx: Receiver,
                what: str) -> Iterator[tuple[Sender, Receiver]]:
    """Wait for the peer's READY, hand its ends out, then send QUIT and reap the process."""
    try:
        if rx.recv(timeout=120) != READY:
            raise RuntimeError(f"{what} did not start")
        yield tx, rx
        tx.send(QUIT)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


@contextmanager
def queue_peer(hwm: int) -> Iterator[tuple[Sender, Receiver]]:
    """The baseline: a spawned process behind two ``multiprocessing.Queue`` of ``hwm`` each."""
    ctx = multiprocessing.get_context("spawn")
    down, up = ctx.Queue(hwm), ctx.Queue(hwm)
    proc = ctx.Process(target=queue_peer_process, args=(down, up), daemon=True)
    proc.start()
    with _ready_peer(proc, QueueSender(down), QueueReceiver(up), "queue peer") as ends:
        yield ends


@contextmanager
def socket_peer(where: str) -> Iterator[tuple[Sender, Receiver]]:
    """The host's own ceiling: a unix socket (ipc) or loopback tcp, no messaging library."""
    family = socket.AF_UNIX if where == "ipc" else socket.AF_INET
    with private_run_dir(prefix="mb-") as run_dir, socket.socket(family) as listener:
        listener.bind(str(run_dir / "raw") if where == "ipc" else ("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(120)
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=socket_peer_process, daemon=True,
                           args=(family, listener.getsockname()))
        proc.start()
        try:
            conn, _ = listener.accept()
        except BaseException:
            proc.kill()
            raise
        with conn:
            if where == "tcp":
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with _ready_peer(proc, StreamSender(conn), StreamReceiver(conn),
                             "socket peer") as ends:
                yield ends
