"""nng over tcp: with keys every tcp endpoint is TLS, the guard's view of accepted connections,
a refusal logged while Python holds the GIL, and repeated TLS set-up and tear-down."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from minisgl_transport_nng.guard import accepted_connections

from minisgl_core.interfaces import ChannelClosed, Sender
from minisgl_core.service.ports import free_port
from minisgl_core.service.rundir import private_run_dir
from minisgl_core.testing.transports import make_transport, write_transport_keys

PLUGINS = ("minisgl_transport_nng",)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_transport_keys("nng", PLUGINS, tmp_path_factory.mktemp("keys"))


def test_with_keys_a_plain_tcp_endpoint_is_opened_as_tls(keys: Path) -> None:
    tp = make_transport("nng", PLUGINS, {"keys": str(keys)})  # ipc endpoints, explicit tcp
    plain = make_transport("nng", PLUGINS, {})
    ep = f"tcp://127.0.0.1:{free_port()}"
    try:
        rx = tp.pull(ep, bind=True)
        assert rx.endpoint == f"tls+{ep}"
        with pytest.raises(ValueError, match="needs keys"):
            plain.push(f"tls+{ep}")
        outsider = threading.Thread(target=_send_until_closed, args=(plain.push(ep), b"clear"),
                                    daemon=True)
        outsider.start()  # a plain tcp dial: the TLS listener never takes its bytes
        tp.push(ep).send(b"over tls")
        assert rx.recv(timeout=10) == b"over tls"
        with pytest.raises(TimeoutError):
            rx.recv(timeout=0.5)  # and nothing else: the clear text never arrived
    finally:
        plain.close()
        tp.close()
    outsider.join(10)
    assert not outsider.is_alive()


def _send_until_closed(tx: Sender, data: bytes) -> None:
    try:
        tx.send(data)
    except ChannelClosed:
        pass


def test_accepted_connections_lists_this_process_sockets() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            conn, _ = server.accept()
            with conn:
                found = accepted_connections({port})
                assert len(found) == 1, found
                (fd, local_ip, local_port, peer_ip, peer_port), = found.values()
                assert fd == conn.fileno()
                assert (local_ip, local_port) == ("127.0.0.1", port)
                assert (peer_ip, peer_port) == client.getsockname()


def test_tls_channels_open_and_close_many_times(keys: Path) -> None:
    """mbedTLS set-up and tear-down, again and again (an nng panic at teardown was seen once)."""
    for i in range(20):
        tp = make_transport("nng", PLUGINS, {"endpoints": "tcp", "keys": str(keys)})
        try:
            with private_run_dir() as run_dir:
                ep = tp.endpoint(run_dir, "again")
                rx = tp.pull(ep, bind=True)
                payload = os.urandom(64 << 10)
                tp.push(ep).send(payload)
                assert rx.recv(timeout=10) == payload, f"round {i}"
        finally:
            tp.close()


# Connects at the wall-clock time argv[3] and sends garbage, then waits to be closed.
_GARBAGE_AT = """
import os, socket, sys, time
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as conn:
    conn.sendall(os.urandom(512))
    conn.settimeout(30)
    try:
        while conn.recv(4096):
            pass
    except ConnectionResetError:
        pass
"""


def test_a_refusal_while_python_holds_the_gil_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """nng counts a refused handshake only while its listener has an accept pending, and
    re-arms that accept after an accepted pipe's callbacks: a callback that waits for the GIL
    (pynng's did) would leave a peer refused meanwhile uncounted, hence unlogged."""
    caplog.set_level(logging.INFO)
    tp = make_transport("nng", PLUGINS, {"endpoints": "tcp"})
    ep = f"tcp://127.0.0.1:{free_port()}"
    switch = sys.getswitchinterval()
    try:
        tp.pull(ep, bind=True)
        garbage_at = time.time() + 1.0
        peer = subprocess.Popen([sys.executable, "-c", _GARBAGE_AT, "127.0.0.1",
                                 ep.rpartition(":")[2], str(garbage_at)])
        sys.setswitchinterval(5.0)  # this thread keeps the GIL while it spins
        tp.push(ep)  # accepted by nng's threads while this thread spins
        while time.time() < garbage_at + 0.5:  # no call here releases the GIL
            pass
        sys.setswitchinterval(switch)
        assert peer.wait(30) == 0
        deadline = time.monotonic() + 30
        while not [r for r in caplog.records if "does not speak the SP protocol" in r.getMessage()]:
            assert time.monotonic() < deadline, "the garbage connection's refusal was not logged"
            time.sleep(0.05)
    finally:
        sys.setswitchinterval(switch)
        tp.close()
