"""TransportContract: the behaviour every minisgl transport promises, as a pytest class.

Subclass it in a test module under a name pytest collects::

    class TestAcme(TransportContract):
        transport = "acme"                      # the registered name
        plugins = ["minisgl_transport_acme"]    # modules to load (None: every entry point)

Multi-process cases are skipped when the transport says ``multiprocess = False``. Nothing here
asserts on timing: waits are bounded, and a timeout is a failure only when nothing happened.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from minisgl_core.interfaces import (
    AddressInUse,
    ChannelClosed,
    MessageTooLarge,
    Receiver,
    Sender,
    Transport,
)
from minisgl_core.rundir import ipc_path, private_run_dir
from minisgl_core.testing import transports as h

MIB = 1 << 20


class TransportContract:
    """Inherit this and set ``transport`` (and usually ``plugins``) to check a transport."""

    transport: ClassVar[str] = ""
    plugins: ClassVar[Sequence[str] | None] = None
    options: ClassVar[Mapping[str, Any]] = {}
    # Options that make the sender-side size limit small (the MessageTooLarge test).
    small_limit_options: ClassVar[Mapping[str, Any]] = {"max_message_bytes": 4096}
    # How many 1 KiB messages a pipeline may buffer to a reader that stopped before send blocks.
    max_buffered_messages: ClassVar[int] = 100_000

    # ---- fixtures ---------------------------------------------------------------------------

    def make(self, **options: Any) -> Transport:
        """A new transport instance of this class's kind, with ``options`` over ``self.options``."""
        return h.make_transport(self.transport, self.plugins, {**self.options, **options})

    @pytest.fixture
    def run_dir(self) -> Iterator[Path]:
        with private_run_dir(prefix="mt-") as path:
            yield path

    @pytest.fixture
    def tp(self) -> Iterator[Transport]:
        transport = self.make()
        try:
            yield transport
        finally:
            transport.close()

    @pytest.fixture
    def pipe(self, tp: Transport, run_dir: Path) -> tuple[Sender, Receiver]:
        """A bound receiver and a connected sender on one endpoint."""
        rx = tp.pull(tp.endpoint(run_dir, "pipe"), bind=True)
        return tp.push(tp.endpoint(run_dir, "pipe")), rx

    def _need_multiprocess(self, tp: Transport) -> None:
        if not tp.multiprocess:
            pytest.skip(f"transport {self.transport} works inside one process only")

    # ---- shape ------------------------------------------------------------------------------

    def test_satisfies_the_protocols(self, tp: Transport, run_dir: Path) -> None:
        assert isinstance(tp, Transport)
        assert tp.name == self.transport
        assert isinstance(tp.multiprocess, bool)
        rx = tp.pull(tp.endpoint(run_dir, "shape"), bind=True)
        tx = tp.push(tp.endpoint(run_dir, "shape"))
        assert isinstance(rx, Receiver) and isinstance(tx, Sender)

    def test_endpoints_are_stable_and_distinct(self, tp: Transport, run_dir: Path,
                                               tmp_path: Path) -> None:
        a = tp.endpoint(run_dir, "scheduler")
        assert isinstance(a, str) and a == tp.endpoint(run_dir, "scheduler")
        assert a != tp.endpoint(run_dir, "frontend.openai-1")
        with private_run_dir(prefix="mt-") as other:
            assert a != tp.endpoint(other, "scheduler")

    # ---- delivery ---------------------------------------------------------------------------

    def test_round_trip(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        for payload in (b"hello", b"", bytes(range(256)) * 3):
            tx.send(payload)
            assert rx.recv(timeout=10) == payload

    def test_round_trip_async(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe

        async def main() -> list[bytes]:
            await tx.asend(b"one")
            await tx.asend(b"two")
            return [await rx.arecv(), await rx.arecv()]

        assert h.run_async(main()) == [b"one", b"two"]

    def test_order_per_sender(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        n = 2000
        sender = threading.Thread(target=lambda: [tx.send(b"%d" % i) for i in range(n)])
        sender.start()
        got = [rx.recv(timeout=10) for _ in range(n)]
        sender.join(10)
        assert got == [b"%d" % i for i in range(n)]

    def test_fan_in_from_threads(self, tp: Transport, run_dir: Path) -> None:
        ep = tp.endpoint(run_dir, "fanin")
        rx = tp.pull(ep, bind=True)
        senders = [tp.push(ep) for _ in range(3)]
        n = 300

        def run(i: int, tx: Sender) -> None:
            for j in range(n):
                tx.send(f"{i}:{j}".encode())

        threads = [threading.Thread(target=run, args=(i, tx)) for i, tx in enumerate(senders)]
        for t in threads:
            t.start()
        got = [rx.recv(timeout=10).decode() for _ in range(3 * n)]
        for t in threads:
            t.join(10)
        for i in range(3):  # all arrived, each sender's messages in its own order
            assert [int(g.split(":")[1]) for g in got if g.startswith(f"{i}:")] == list(range(n))

    def test_fan_in_from_processes(self, tp: Transport, run_dir: Path) -> None:
        self._need_multiprocess(tp)
        ep = tp.endpoint(run_dir, "procs")
        rx = tp.pull(ep, bind=True)
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Event()
        n = 300
        procs = [ctx.Process(target=h.child_push, daemon=True,
                             args=(self.transport, self.plugins, dict(self.options), ep, i, n,
                                   i == 1, done))
                 for i in range(2)]
        for p in procs:
            p.start()
        try:
            got = [rx.recv(timeout=60).decode() for _ in range(2 * n)]
        finally:
            done.set()
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        for i in range(2):
            assert [int(g.split(":")[1]) for g in got if g.startswith(f"{i}:")] == list(range(n))

    def test_sync_sender_async_receiver(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        n = 500
        sender = threading.Thread(target=lambda: [tx.send(b"%d" % i) for i in range(n)])

        async def main() -> list[bytes]:
            sender.start()
            return [await rx.arecv() for _ in range(n)]

        assert h.run_async(main()) == [b"%d" % i for i in range(n)]
        sender.join(10)

    def test_async_sender_sync_receiver(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        n = 500

        async def send_all() -> None:
            for i in range(n):
                await tx.asend(b"%d" % i)

        sender = threading.Thread(target=h.run_async, args=(send_all(),))
        sender.start()
        got = [rx.recv(timeout=10) for _ in range(n)]
        sender.join(10)
        assert got == [b"%d" % i for i in range(n)]

    def test_async_sender_and_receiver_in_one_loop(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        n = 3000  # more than any buffer: the two tasks must interleave

        async def send_all() -> None:
            for i in range(n):
                await tx.asend(b"%d" % i)

        async def main() -> list[bytes]:
            task = asyncio.create_task(send_all())
            got = [await rx.arecv() for _ in range(n)]
            await task
            return got

        assert h.run_async(main()) == [b"%d" % i for i in range(n)]

    def test_late_start_delivers_once_the_receiver_binds(self, tp: Transport,
                                                         run_dir: Path) -> None:
        ep = tp.endpoint(run_dir, "late")
        tx = tp.push(ep)  # connects to nothing yet; send waits for a peer
        sender = threading.Thread(target=tx.send, args=(b"early",))
        sender.start()
        rx = tp.pull(ep, bind=True)
        assert rx.recv(timeout=10) == b"early"
        sender.join(10)

    def test_large_messages(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        blobs = [os.urandom(MIB) for _ in range(3)]
        sender = threading.Thread(target=lambda: [tx.send(b) for b in blobs])
        sender.start()
        assert [rx.recv(timeout=20) for _ in blobs] == blobs
        sender.join(10)

        async def main() -> bytes:
            await tx.asend(blobs[0])
            return await rx.arecv()

        assert h.run_async(main()) == blobs[0]

    def test_oversize_message_is_refused_before_the_wire(self, run_dir: Path) -> None:
        tp = self.make(**self.small_limit_options)
        try:
            limit = int(self.small_limit_options["max_message_bytes"])
            ep = tp.endpoint(run_dir, "limit")
            rx = tp.pull(ep, bind=True)
            tx = tp.push(ep)
            with pytest.raises(MessageTooLarge):
                tx.send(b"x" * (limit + 1))
            with pytest.raises(MessageTooLarge):
                h.run_async(tx.asend(b"x" * (limit + 1)))
            tx.send(b"y" * limit)  # the connection is intact: nothing oversize went out
            tx.send(b"after")
            assert rx.recv(timeout=10) == b"y" * limit
            assert rx.recv(timeout=10) == b"after"
        finally:
            tp.close()

    # ---- timeouts and close -----------------------------------------------------------------

    def test_recv_timeout_and_nowait(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        with pytest.raises(TimeoutError):
            rx.recv(timeout=0.05)
        with pytest.raises(TimeoutError):
            rx.recv(timeout=0)
        assert rx.recv_nowait() is None
        tx.send(b"m")
        for _ in range(5000):  # bounded poll: the message may take a moment to cross
            got = rx.recv_nowait()
            if got is not None:
                break
            threading.Event().wait(0.002)
        assert got == b"m"

    def test_a_recv_timeout_does_not_leak_into_arecv(self, pipe: tuple[Sender,
                                                                      Receiver]) -> None:
        tx, rx = pipe
        with pytest.raises(TimeoutError):
            rx.recv(timeout=0.01)

        async def main() -> bytes:
            async def later() -> None:
                await asyncio.sleep(0.2)  # well past the recv timeout above
                await tx.asend(b"late")

            task = asyncio.create_task(later())
            got = await rx.arecv()
            await task
            return got

        assert h.run_async(main()) == b"late"

    def test_cancelled_arecv_loses_nothing(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe

        async def main() -> list[bytes]:
            for _ in range(5):
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(rx.arecv(), 0.01)
            for i in range(50):
                await tx.asend(b"%d" % i)
            return [await asyncio.wait_for(rx.arecv(), 10) for _ in range(50)]

        assert h.run_async(main()) == [b"%d" % i for i in range(50)]

    def test_close_wakes_a_blocked_recv(self, pipe: tuple[Sender, Receiver]) -> None:
        _, rx = pipe
        outcome: list[BaseException] = []
        th = threading.Thread(target=lambda: outcome.append(_raises(rx.recv)))
        th.start()
        threading.Event().wait(0.05)
        rx.close()
        th.join(10)
        assert not th.is_alive() and isinstance(outcome[0], ChannelClosed), outcome

    def test_close_wakes_a_pending_arecv(self, pipe: tuple[Sender, Receiver]) -> None:
        _, rx = pipe

        async def main() -> None:
            task = asyncio.create_task(rx.arecv())
            await asyncio.sleep(0.05)
            rx.close()
            with pytest.raises(ChannelClosed):
                await asyncio.wait_for(task, 10)

        h.run_async(main())

    def test_close_from_another_thread_wakes_arecv(self, pipe: tuple[Sender, Receiver]) -> None:
        _, rx = pipe

        async def main() -> None:
            task = asyncio.create_task(rx.arecv())
            await asyncio.sleep(0.05)
            await asyncio.get_running_loop().run_in_executor(None, rx.close)
            with pytest.raises(ChannelClosed):
                await asyncio.wait_for(task, 10)

        h.run_async(main())

    def test_use_after_close_raises_channel_closed(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        tx.close()
        rx.close()
        with pytest.raises(ChannelClosed):
            tx.send(b"x")
        with pytest.raises(ChannelClosed):
            h.run_async(tx.asend(b"x"))
        with pytest.raises(ChannelClosed):
            rx.recv(timeout=1)
        with pytest.raises(ChannelClosed):
            rx.recv_nowait()
        with pytest.raises(ChannelClosed):
            h.run_async(rx.arecv())

    def test_close_is_idempotent_and_transport_close_closes_channels(self, run_dir: Path) -> None:
        tp = self.make()
        rx = tp.pull(tp.endpoint(run_dir, "idem"), bind=True)
        tx = tp.push(tp.endpoint(run_dir, "idem"))
        tx.close()
        tx.close()
        tp.close()
        tp.close()
        rx.close()
        with pytest.raises(ChannelClosed):
            rx.recv(timeout=1)
        with pytest.raises(ChannelClosed):
            tp.push(tp.endpoint(run_dir, "after"))

    # ---- binding ----------------------------------------------------------------------------

    def test_second_bind_is_rejected_and_close_frees_the_endpoint(self, tp: Transport,
                                                                  run_dir: Path) -> None:
        ep = tp.endpoint(run_dir, "bind")
        rx = tp.pull(ep, bind=True)
        with pytest.raises(AddressInUse):
            tp.pull(ep, bind=True)
        other = self.make()  # a second instance (its own context, for libraries that have one)
        try:
            with pytest.raises(AddressInUse):
                other.pull(ep, bind=True)
        finally:
            other.close()
        tx = tp.push(ep)
        tx.send(b"first")
        assert rx.recv(timeout=10) == b"first"
        rx.close()
        rx2 = tp.pull(ep, bind=True)
        for i in range(500):  # at-most-once: a message may die with the old receiver; retry
            tx.send(b"again")
            try:
                assert rx2.recv(timeout=0.05) == b"again"
                break
            except TimeoutError:
                assert i < 499, "a sender never reached the rebound receiver"

    def test_closing_a_bound_ipc_channel_leaves_no_file(self, tp: Transport,
                                                        run_dir: Path) -> None:
        ep = tp.endpoint(run_dir, "tidy")
        path = ipc_path(ep)
        if path is None:
            pytest.skip(f"{ep} is not a file system ipc endpoint")
        rx = tp.pull(ep, bind=True)
        assert os.path.exists(path)
        rx.close()
        assert not os.path.exists(path)

    # ---- high-water mark --------------------------------------------------------------------

    def test_send_blocks_when_the_receiver_stops_reading(self, pipe: tuple[Sender,
                                                                           Receiver]) -> None:
        tx, rx = pipe
        tx.send(b"hello")
        assert rx.recv(timeout=10) == b"hello"
        pump = h.Pump(tx)
        pump.start()
        h.wait_until_stalled(lambda: pump.sent, cap=self.max_buffered_messages)
        pump.stop.set()
        got = 0  # now drain: the blocked send completes and nothing is lost or reordered
        while pump.is_alive() or got < pump.sent:
            try:
                msg = rx.recv(timeout=10)
            except TimeoutError:
                raise AssertionError(f"drain stuck: {got} of {pump.sent} received, sender "
                                     f"{'blocked' if pump.is_alive() else 'done'}") from None
            assert h.seq(msg) == got
            got += 1
        assert pump.error is None and got == pump.sent

    def test_close_wakes_a_blocked_send(self, pipe: tuple[Sender, Receiver]) -> None:
        tx, rx = pipe
        tx.send(b"hello")
        assert rx.recv(timeout=10) == b"hello"
        pump = h.Pump(tx)
        pump.start()
        h.wait_until_stalled(lambda: pump.sent, cap=self.max_buffered_messages)
        tx.close()
        pump.join(10)
        assert not pump.is_alive() and isinstance(pump.error, ChannelClosed), pump.error

    # ---- pub/sub ----------------------------------------------------------------------------

    def test_pub_sub_delivers_after_a_handshake(self, tp: Transport, run_dir: Path) -> None:
        pub = tp.pub(tp.endpoint(run_dir, "events"), bind=True)
        subs = [tp.sub(tp.endpoint(run_dir, "events")) for _ in range(2)]
        h.handshake(pub, subs)
        for i in range(20):  # low rate (lock-step): nothing may be dropped
            pub.send(b"event %d" % i)
            for sub in subs:
                assert h.recv_data(sub) == b"event %d" % i

    def test_pub_never_blocks(self, tp: Transport, run_dir: Path) -> None:
        pub = tp.pub(tp.endpoint(run_dir, "burst"), bind=True)
        for _ in range(1000):
            pub.send(b"nobody listens")
        sub = tp.sub(tp.endpoint(run_dir, "burst"))
        h.handshake(pub, [sub])
        burst = threading.Thread(target=lambda: [pub.send(b"%d" % i) for i in range(20_000)])
        burst.start()
        burst.join(60)
        assert not burst.is_alive(), "a publisher blocked on an idle subscriber"
        got: list[int] = []
        while (msg := _recv_or_none(sub, 0.5)) is not None:
            if msg != b"probe":
                got.append(int(msg))
        assert got and got == sorted(got) and got[-1] < 20_000  # best effort, order kept

    def test_async_pub_sub(self, tp: Transport, run_dir: Path) -> None:
        pub = tp.pub(tp.endpoint(run_dir, "apub"), bind=True)
        sub = tp.sub(tp.endpoint(run_dir, "apub"))
        h.handshake(pub, [sub])

        async def main() -> bytes:
            await pub.asend(b"async event")
            while (msg := await sub.arecv()) == b"probe":
                pass
            return msg

        assert h.run_async(main()) == b"async event"


def _raises(fn: Any) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:
        return exc
    return None


def _recv_or_none(rx: Receiver, timeout: float) -> bytes | None:
    try:
        return rx.recv(timeout=timeout)
    except TimeoutError:
        return None
