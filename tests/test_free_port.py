"""free_port gives a port that binds, picked outside the range the kernel hands to outgoing
connections, so a host busy with connections cannot take it before the caller binds it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from minisgl_core.service import ports
from minisgl_core.service.ports import free_port


def test_the_port_binds_and_is_below_the_ephemeral_range() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
    low = ports._ephemeral_low()
    if low > ports._LOWEST:
        assert ports._LOWEST <= port < low
    else:
        pytest.skip("the kernel does not say which ports outgoing connections take")


def test_an_unreadable_range_falls_back_to_a_kernel_chosen_port(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE", tmp_path / "missing")
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    held = socket.socket()
    held.bind(("127.0.0.1", free_port()))
    held.listen()
    taken = held.getsockname()[1]
    try:
        monkeypatch.setattr(ports.random, "randrange", lambda _lo, _hi: taken)
        # every pick is the taken port: free_port falls back to one the kernel chooses
        assert free_port() != taken
    finally:
        held.close()
