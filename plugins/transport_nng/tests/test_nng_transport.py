"""nng specifics beyond the contract: socket options, foreign binders, no fd leaks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pynng
import pytest
from minisgl_transport_nng.transport import NngTransport

from minisgl_core.interfaces import AddressInUse
from minisgl_core.service.rundir import private_run_dir


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with private_run_dir() as path:
        yield path


def test_the_plugin_module_does_not_import_pynng() -> None:
    code = "import sys, minisgl_transport_nng; print('pynng' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(("hwm", "buffer"), [(123, 123), (100_000, 8192)])
def test_socket_options(run_dir: Path, hwm: int, buffer: int) -> None:
    t = NngTransport({"hwm": hwm, "max_message_bytes": 4567})
    try:
        ep = t.endpoint(run_dir, "opts")
        rx, tx = t.pull(ep, bind=True), t.push(ep)
        assert tx._sock.send_buffer_size == buffer and rx._sock.recv_buffer_size == buffer
        for sock in (rx._sock, tx._sock):
            assert sock.recv_max_size == 4567
            assert sock.reconnect_time_min == 20  # nng's default is a full second
    finally:
        t.close()


def test_a_foreign_listener_means_address_in_use(run_dir: Path) -> None:
    t = NngTransport()
    ep = t.endpoint(run_dir, "taken")
    foreign = pynng.Pull0(listen=ep)
    try:
        with pytest.raises(AddressInUse):
            t.pull(ep, bind=True)
    finally:
        foreign.close()
        t.close()


def test_channels_leave_no_file_descriptors_behind(run_dir: Path) -> None:
    t = NngTransport()
    try:
        def cycle(i: int) -> None:
            ep = t.endpoint(run_dir, f"fd{i}")
            rx, tx = t.pull(ep, bind=True), t.push(ep)
            tx.send(b"x")
            assert rx.recv(timeout=10) == b"x"
            tx.close()
            rx.close()

        cycle(-1)  # the first socket starts nng's worker threads, with their own fds
        before = len(os.listdir("/proc/self/fd"))
        for i in range(50):
            cycle(i)
        for _ in range(250):  # sockets are reaped by a library thread, a moment later
            if len(os.listdir("/proc/self/fd")) <= before:
                break
            time.sleep(0.02)
        assert len(os.listdir("/proc/self/fd")) <= before
    finally:
        t.close()
