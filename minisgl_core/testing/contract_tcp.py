"""Transport contract, tcp: endpoints on a host and a port range, keys required off loopback,
and peers that are refused (other keys, garbage, a silent connection) without harm to others."""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from minisgl_core.interfaces import ChannelClosed, Sender, Transport
from minisgl_core.plugin.transport_tcp import split_tcp
from minisgl_core.service.ports import free_port
from minisgl_core.testing import transports as h
from minisgl_core.testing.contract_base import ContractBase

REFUSAL_WAIT_S = 60.0
GARBAGE_TRIES = 3  # connections that send garbage, until one refusal is logged
GARBAGE_WAIT_S = 10.0  # for each one's warning


class TcpCases(ContractBase):
    """What a transport with ``endpoints = "tcp"`` (``NetworkOptions``) promises."""

    options: ClassVar[dict[str, Any]] = {"endpoints": "tcp"}
    # A warning the transport logs for each refused peer, naming the endpoint (None: not checked).
    refusal_pattern: ClassVar[str | None] = r"refused a peer"

    def _need_keys(self) -> None:
        if not self.with_keys:
            pytest.skip("this case needs keys (with_keys = True)")

    def _refusals(self, caplog: pytest.LogCaptureFixture, endpoint: str) -> list[str]:
        """The refusal warnings logged so far that name ``endpoint``."""
        assert self.refusal_pattern is not None
        pattern = re.compile(self.refusal_pattern)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        return [m for m in lines if endpoint in m and pattern.search(m)]

    def _refused_within(self, caplog: pytest.LogCaptureFixture, endpoint: str, count: int,
                        seconds: float) -> bool:
        """Whether ``count`` refusal warnings name ``endpoint`` within ``seconds``."""
        deadline = time.monotonic() + seconds
        while len(self._refusals(caplog, endpoint)) < count:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _wait_for_refusals(self, caplog: pytest.LogCaptureFixture, endpoint: str,
                           count: int) -> None:
        """Wait until ``count`` refusal warnings name ``endpoint``."""
        if self.refusal_pattern is None:
            return
        assert self._refused_within(caplog, endpoint, count, REFUSAL_WAIT_S), (
            f"waited {REFUSAL_WAIT_S:.0f} s for {count} refusal warnings on {endpoint}; "
            f"got {self._refusals(caplog, endpoint)}")

    def _refuse_garbage(self, address: tuple[str, int], caplog: pytest.LogCaptureFixture,
                        endpoint: str) -> int:
        """Connect, send garbage, and see the connection closed and (with ``refusal_pattern``)
        the refusal logged; the refusal warnings on ``endpoint`` so far. A transport may miss
        the count of a peer that arrives while it re-arms its accept after a new pipe (nng:
        its guard's docstring), so up to ``GARBAGE_TRIES`` connections are sent, each closed,
        until one is logged."""
        for _ in range(GARBAGE_TRIES):
            with socket.create_connection(address) as garbage:
                garbage.sendall(os.urandom(512))
                _read_until_closed(garbage, "a connection that sent garbage")
            if self.refusal_pattern is None:
                return 0
            if self._refused_within(caplog, endpoint, 1, GARBAGE_WAIT_S):
                return len(self._refusals(caplog, endpoint))
        raise AssertionError(f"none of {GARBAGE_TRIES} connections that sent garbage to "
                             f"{endpoint} was logged as refused within {GARBAGE_WAIT_S:.0f} s")

    # ---- options ----------------------------------------------------------------------------

    def test_tcp_endpoints_use_the_host_and_the_port_range(self, run_dir: Path) -> None:
        base = free_port()
        first, last = (base, base + 15) if base + 15 <= 65535 else (base - 15, base)
        tp, again = self.make(ports=f"{first}-{last}"), self.make(ports=f"{first}-{last}")
        try:
            endpoints = [tp.endpoint(run_dir, name) for name in ("a", "b", "c")]
            for ep in endpoints:
                parts = split_tcp(ep)
                assert parts is not None and parts[1] == "127.0.0.1", ep
                assert first <= parts[2] <= last, f"{ep} is outside {first}-{last}"
            assert len(set(endpoints)) == 3
            # another instance (another process of the run) reads the same ports
            assert [again.endpoint(run_dir, name) for name in ("a", "b", "c")] == endpoints
            rx = tp.pull(endpoints[0], bind=True)
            again.push(endpoints[0]).send(b"in range")
            assert rx.recv(timeout=10) == b"in range"
        finally:
            tp.close()
            again.close()

    @pytest.mark.parametrize(("key", "value"), [
        ("host", "not-an-address"), ("host", 12), ("ports", "70000"), ("ports", "5700-5600"),
        ("ports", "56x"), ("endpoints", "udp"), ("handshake_ms", 0)])
    def test_bad_tcp_options_are_refused(self, key: str, value: Any) -> None:
        with pytest.raises(ValueError, match=key):
            self.make(**{key: value}).close()

    def test_a_socket_leaving_the_host_needs_keys(self) -> None:
        with pytest.raises(ValueError, match="minisgl keys new"):
            self.make(host="0.0.0.0", keys="").close()
        tp = self.make(keys="")
        try:
            with pytest.raises(ValueError, match="minisgl keys new"):
                tp.push("tcp://192.0.2.1:5600")  # TEST-NET-1: refused before any connect
        finally:
            tp.close()

    def test_a_wildcard_host_with_keys_round_trips(self, run_dir: Path) -> None:
        self._need_keys()
        tp = self.make(host="0.0.0.0")
        try:
            ep = tp.endpoint(run_dir, "everywhere")
            rx = tp.pull(ep, bind=True)
            tp.push(ep).send(b"from this host")
            assert rx.recv(timeout=10) == b"from this host"
        finally:
            tp.close()

    # ---- refused peers ----------------------------------------------------------------------

    def test_a_peer_with_other_keys_is_refused(self, tp: Transport, run_dir: Path,
                                               tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
        self._need_keys()
        caplog.set_level(logging.INFO)
        ep = tp.endpoint(run_dir, "guarded")
        rx = tp.pull(ep, bind=True)
        other_keys = h.write_transport_keys(self.transport, self.plugins, tmp_path / "other")
        other = self.make(keys=str(other_keys))
        intruder = other.push(ep)
        sender = threading.Thread(target=_send_until_closed, args=(intruder, b"intruder"),
                                  daemon=True)
        sender.start()
        try:
            member = tp.push(ep)
            member.send(b"member")
            assert rx.recv(timeout=10) == b"member"
            self._wait_for_refusals(caplog, ep, 1)
            member.send(b"member again")  # the refused peer never got in ahead of it
            assert rx.recv(timeout=10) == b"member again"
        finally:
            other.close()
            sender.join(10)
        assert not sender.is_alive()

    def test_garbage_and_silent_connections_are_refused(self, run_dir: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.INFO)
        tp = self.make(handshake_ms=500)
        try:
            ep = tp.endpoint(run_dir, "noise")
            rx = tp.pull(ep, bind=True)
            parts = split_tcp(ep)
            assert parts is not None
            address = (parts[1], parts[2])
            first = tp.push(ep)
            first.send(b"before")
            assert rx.recv(timeout=10) == b"before"
            refused = self._refuse_garbage(address, caplog, ep)
            with socket.create_connection(address) as silent:
                late = tp.push(ep)  # connects while the silent one stalls its handshake
                late.send(b"during")
                first.send(b"still")
                assert {rx.recv(timeout=10), rx.recv(timeout=10)} == {b"during", b"still"}
                _read_until_closed(silent, "a connection that never sent a byte")
            self._wait_for_refusals(caplog, ep, refused + 1)
            first.send(b"after")
            assert rx.recv(timeout=10) == b"after"
        finally:
            tp.close()


def _send_until_closed(tx: Sender, data: bytes) -> None:
    """Send once; a refused sender waits for a peer forever, until its transport closes."""
    try:
        tx.send(data)
    except ChannelClosed:
        pass


def _read_until_closed(conn: socket.socket, what: str) -> None:
    """Read (and drop) whatever the transport sends until it closes ``conn``."""
    conn.settimeout(REFUSAL_WAIT_S)
    try:
        while conn.recv(4096):
            pass
    except TimeoutError:
        raise AssertionError(f"{what} was still open after {REFUSAL_WAIT_S:.0f} s") from None
    except ConnectionResetError:
        pass
