"""zmq over tcp: what CURVE refuses beyond the contract, and how the key files are read."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from minisgl_core.interfaces import ChannelClosed
from minisgl_core.service.rundir import private_run_dir
from minisgl_core.testing.transports import make_transport, write_transport_keys

PLUGINS = ("minisgl_transport_zmq",)


def _zmq(keys: Path | None, **options: object):
    table = {"endpoints": "tcp", **options}
    if keys is not None:
        table["keys"] = str(keys)
    return make_transport("zmq", PLUGINS, table)


def _send_until_closed(tx, data: bytes) -> None:
    try:
        tx.send(data)
    except ChannelClosed:
        pass


def _wait_for_warning(caplog: pytest.LogCaptureFixture, *words: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        for record in caplog.records:
            if record.levelno >= logging.WARNING and all(w in record.getMessage() for w in words):
                return record.getMessage()
        assert time.monotonic() < deadline, f"no warning with {words} in 60 s"
        time.sleep(0.05)


def _public_line(path: Path) -> str:
    return next(line for line in path.read_text().splitlines() if "public-key" in line)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_transport_keys("zmq", PLUGINS, tmp_path_factory.mktemp("keys"))


@pytest.mark.parametrize("stolen", ["server public key only", "no keys at all"])
def test_a_client_without_the_client_secret_is_refused(keys: Path, tmp_path: Path, stolen: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Knowing the server's public key is not enough: the ZAP handler wants the client key."""
    caplog.set_level(logging.INFO)
    mine = _zmq(keys)
    if stolen == "server public key only":
        intruder_keys = write_transport_keys("zmq", PLUGINS, tmp_path / "intruder")
        # its own client pair, our server's public key (the connecting side uses nothing else)
        ours = _public_line(keys / "zmq" / "server.key")
        forged = intruder_keys / "zmq" / "server.key_secret"
        text = forged.read_text()
        forged.write_text(text.replace(_public_line(forged), ours))
        theirs = _zmq(intruder_keys)
        words = ("CURVE client key", "a peer at 127.0.0.1")
    else:
        theirs = _zmq(None)
        words = ("refused a peer",)
    try:
        with private_run_dir() as run_dir:
            ep = mine.endpoint(run_dir, "inbox")
            rx = mine.pull(ep, bind=True)
            intruder = threading.Thread(target=_send_until_closed,
                                        args=(theirs.push(ep), b"intruder"), daemon=True)
            intruder.start()
            _wait_for_warning(caplog, ep, *words)
            mine.push(ep).send(b"member")
            assert rx.recv(timeout=10) == b"member"  # first: the intruder never got a message in
    finally:
        theirs.close()
        mine.close()
    intruder.join(10)
    assert not intruder.is_alive()


def test_key_files_that_others_may_read_are_refused(tmp_path: Path) -> None:
    keys = write_transport_keys("zmq", PLUGINS, tmp_path / "keys")
    os.chmod(keys / "zmq" / "client.key_secret", 0o644)
    with pytest.raises(ValueError, match="client.key_secret may be read by others"):
        _zmq(keys)
    os.chmod(keys / "zmq" / "client.key_secret", 0o600)
    (keys / "zmq" / "server.key_secret").unlink()
    with pytest.raises(ValueError, match="server.key_secret is missing"):
        _zmq(keys)


def test_the_handshake_timer_is_named_whatever_errno_libzmq_passes() -> None:
    """libzmq reports its handshake timer as a no-detail failure with whatever errno its I/O
    thread last set (once, under load, EPROTO from another peer's protocol error): a connection
    that has waited the timer out is what says it was the timer."""
    import errno

    import zmq
    from minisgl_transport_zmq.security import _reason, _Watched

    no_detail = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    w = _Watched("tcp://127.0.0.1:1", bound=True, accepted={})
    w.accepted[7] = (0, 0, time.monotonic())  # just accepted: too young for the timer
    assert not w.timed_out(500)
    w.accepted[8] = (0, 0, time.monotonic() - 0.6)  # waited 600 ms of a 500 ms timer
    assert w.timed_out(500)
    assert not w.timed_out(500)  # that one is reported once
    timer = _reason(no_detail, errno.EPROTO, True, 500, timer=True)
    assert timer == "no handshake within handshake_ms=500"
    assert _reason(no_detail, errno.EAGAIN, True, 500) == timer
    assert _reason(no_detail, errno.EPIPE, True, 500) == "the handshake broke off (Broken pipe)"
