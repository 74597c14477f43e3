"""inproc specifics beyond the contract: exact buffering, endpoint table hygiene, registration."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from minisgl_core.default_plugins import inproc_channels
from minisgl_core.default_plugins.inproc import InprocTransport
from minisgl_core.interfaces import ChannelClosed
from minisgl_core.plugin.loading import build_manager, collect
from minisgl_core.service.rundir import private_run_dir
from minisgl_core.testing import transports as h


@pytest.fixture
def run_dir() -> Iterator[Path]:
    with private_run_dir() as path:
        yield path


def test_registered_by_the_core_as_a_lazy_target() -> None:
    entry = collect(build_manager(autoload=False)).transports.entry("inproc")
    assert entry.target == "minisgl_core.default_plugins.inproc:InprocTransport"
    assert entry.owner == "core.inproc"


def test_the_plugin_module_imports_no_asyncio() -> None:
    code = ("import sys, minisgl_core.default_plugins.inproc; "
            "print(sorted(m for m in ('asyncio', 'zmq', 'pynng', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_pipeline_buffers_exactly_hwm_messages(run_dir: Path) -> None:
    t = InprocTransport({"hwm": 10})
    try:
        ep = t.endpoint(run_dir, "hwm")
        rx, tx = t.pull(ep, bind=True), t.push(ep)
        pump = h.Pump(tx, size=16)
        pump.start()
        assert h.wait_until_stalled(lambda: pump.sent, cap=10) == 10
        assert rx.recv(timeout=5)[:8] == (0).to_bytes(8, "little")  # room for one more
        h.wait_until_stalled(lambda: pump.sent if pump.sent > 10 else 0, cap=11)
        tx.close()
        pump.join(5)
        assert isinstance(pump.error, ChannelClosed)
    finally:
        t.close()


def test_send_waits_for_a_receiver_and_the_last_receiver_drops_unread(run_dir: Path) -> None:
    t = InprocTransport()
    try:
        ep = t.endpoint(run_dir, "drop")
        tx = t.push(ep)
        rx = t.pull(ep, bind=True)
        tx.send(b"unread")
        rx.close()  # linger 0: the unread message goes with the last receiver
        sender = threading.Thread(target=tx.send, args=(b"fresh",))
        sender.start()
        rx2 = t.pull(ep, bind=True)
        assert rx2.recv(timeout=5) == b"fresh"
        sender.join(5)
    finally:
        t.close()


def test_receivers_of_one_pipeline_share_its_messages(run_dir: Path) -> None:
    t = InprocTransport()
    try:
        ep = t.endpoint(run_dir, "share")
        tx = t.push(ep, bind=True)  # one sender bound, two receivers connected
        a, b = t.pull(ep, bind=False), t.pull(ep, bind=False)
        for i in range(100):
            tx.send(b"%d" % i)
        got = []
        for rx in (b, a):
            while (m := rx.recv_nowait()) is not None:
                got.append(m)
        assert sorted(got, key=int) == [b"%d" % i for i in range(100)]
    finally:
        t.close()


def test_a_full_subscriber_loses_the_newest(run_dir: Path) -> None:
    t = InprocTransport({"hwm": 5})
    try:
        pub = t.pub(t.endpoint(run_dir, "ev"))
        sub = t.sub(t.endpoint(run_dir, "ev"))
        for i in range(10):
            pub.send(b"%d" % i)
        assert [sub.recv(timeout=1) for _ in range(5)] == [b"%d" % i for i in range(5)]
        assert sub.recv_nowait() is None
    finally:
        t.close()


def test_endpoint_table_is_emptied_when_every_end_closes(run_dir: Path) -> None:
    t = InprocTransport()
    ep = t.endpoint(run_dir, "gone")
    t.pull(ep, bind=True)
    t.push(ep)
    assert ep in inproc_channels.TABLE
    t.close()
    assert ep not in inproc_channels.TABLE


def test_a_message_sent_just_before_an_async_wait_is_not_lost(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer thread sends between arecv's empty look and its wait: arecv still returns it."""
    t = InprocTransport()
    try:
        ep = t.endpoint(run_dir, "race")
        rx, tx = t.pull(ep, bind=True), t.push(ep)
        original = inproc_channels.End._wait

        async def send_first(self: inproc_channels.End, *args: object) -> None:
            peer = threading.Thread(target=tx.send, args=(b"late",))
            peer.start()  # completes its send and its wake-up before the wait begins
            peer.join(10)
            await original(self, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(inproc_channels.End, "_wait", send_first)

        async def receive() -> bytes:
            return await asyncio.wait_for(rx.arecv(), 10)

        assert asyncio.run(receive()) == b"late"
    finally:
        t.close()


def test_misuse_is_refused_with_clear_errors(run_dir: Path) -> None:
    t = InprocTransport()
    try:
        ep = t.endpoint(run_dir, "kind")
        t.pull(ep, bind=True)
        with pytest.raises(ValueError, match="is a pipeline endpoint, not a fanout one"):
            t.sub(ep)
        with pytest.raises(ValueError, match="start with inproc://"):
            t.pull("ipc:///tmp/x", bind=True)
        with pytest.raises(ValueError, match="bad channel name"):
            t.endpoint(run_dir, "../escape")
    finally:
        t.close()


@pytest.mark.parametrize(("options", "match"), [
    ({"hmw": 5}, "unknown option 'hmw' for transport 'inproc'; did you mean \"hwm\"?"),
    ({"hwm": 0}, "must be a positive integer"),
    ({"max_message_bytes": "1MiB"}, "must be a positive integer"),
    ({"reconnect_ms": True}, "must be a positive integer"),
])
def test_bad_options_are_rejected(options: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        InprocTransport(options)
