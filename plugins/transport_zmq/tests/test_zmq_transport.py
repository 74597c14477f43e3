"""zmq specifics beyond the contract: socket options, the bind guard, buffering, no fd leaks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from minisgl_transport_zmq.transport import ZmqTransport

from minisgl_core.interfaces import AddressInUse
from minisgl_core.service.rundir import private_run_dir
from minisgl_core.testing import transports as h


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with private_run_dir() as path:
        yield path


@pytest.fixture
def tp() -> Iterator[ZmqTransport]:
    t = ZmqTransport({"hwm": 123, "max_message_bytes": 4567, "reconnect_ms": 30})
    yield t
    t.close()


def test_the_plugin_module_does_not_import_zmq() -> None:
    code = "import sys, minisgl_transport_zmq; print('zmq' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_sockets_get_linger_0_immediate_hwm_and_size_limit(tp: ZmqTransport,
                                                           run_dir: Path) -> None:
    ep = tp.endpoint(run_dir, "opts")
    rx, tx = tp.pull(ep, bind=True), tp.push(ep)
    rsock, tsock = rx._sock, tx._sock
    for sock in (rsock, tsock):
        assert sock.getsockopt(zmq.LINGER) == 0
        assert sock.getsockopt(zmq.SNDHWM) == 123 and sock.getsockopt(zmq.RCVHWM) == 123
        assert sock.getsockopt(zmq.RECONNECT_IVL) == 30
    assert tsock.getsockopt(zmq.IMMEDIATE) == 1  # the connecting end
    assert rsock.getsockopt(zmq.MAXMSGSIZE) == 4567  # the receiving end


def test_plain_zmq_would_steal_a_live_path_which_the_plugin_refuses(tp: ZmqTransport,
                                                                    run_dir: Path) -> None:
    ep = tp.endpoint(run_dir, "steal")
    ctx = zmq.Context()
    try:
        first = ctx.socket(zmq.PULL)
        first.bind(ep)
        second = ctx.socket(zmq.PULL)
        second.bind(ep)  # the library's behaviour: no error, `first` is orphaned
        second.close(0)
        first.close(0)
        foreign = ctx.socket(zmq.PULL)  # a live binder that minisgl knows nothing about
        foreign.bind(ep)
        with pytest.raises(AddressInUse):
            tp.pull(ep, bind=True)
        foreign.close(0)
    finally:
        ctx.destroy(0)


def test_a_stale_socket_file_is_reclaimed(tp: ZmqTransport, run_dir: Path) -> None:
    import socket

    ep = tp.endpoint(run_dir, "stale")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(ep[len("ipc://"):])
    dead.close()  # the file stays, nothing listens: what a killed process leaves behind
    rx = tp.pull(ep, bind=True)
    tp.push(ep).send(b"ok")
    assert rx.recv(timeout=10) == b"ok"


def test_hwm_sets_how_much_a_stopped_reader_absorbs(run_dir: Path) -> None:
    stalled = {}
    for hwm in (10, 3000):
        t = ZmqTransport({"hwm": hwm})
        try:
            ep = t.endpoint(run_dir, f"hwm{hwm}")
            t.pull(ep, bind=True)
            pump = h.Pump(t.push(ep), size=1024)
            pump.start()
            stalled[hwm] = h.wait_until_stalled(lambda p=pump: p.sent, cap=100_000)
        finally:
            t.close()
        pump.join(10)
    assert stalled[10] < stalled[3000]
    assert stalled[3000] >= 3000  # at least one full pipe's worth before blocking


def test_channels_leave_no_file_descriptors_behind(tp: ZmqTransport, run_dir: Path) -> None:
    def cycle(i: int) -> None:
        ep = tp.endpoint(run_dir, f"fd{i}")
        rx, tx = tp.pull(ep, bind=True), tp.push(ep)
        tx.send(b"x")
        assert rx.recv(timeout=10) == b"x"
        tx.close()
        rx.close()

    cycle(-1)  # the first socket starts zmq's I/O and reaper threads, with their own fds
    before = len(os.listdir("/proc/self/fd"))
    for i in range(50):
        cycle(i)
    for _ in range(250):  # sockets are reaped by a library thread, a moment later
        if len(os.listdir("/proc/self/fd")) <= before:
            break
        time.sleep(0.02)
    assert len(os.listdir("/proc/self/fd")) <= before
