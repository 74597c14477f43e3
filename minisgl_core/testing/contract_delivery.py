"""Transport contract, delivery: round trips, order, fan-in, sync/async mixes, sizes."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from minisgl_core.interfaces import MessageTooLarge, Receiver, Sender, Transport
from minisgl_core.testing import transports as h
from minisgl_core.testing.contract_base import ContractBase

MIB = 1 << 20


class DeliveryCases(ContractBase):
    """Messages arrive whole, in order per sender, from threads, tasks and processes."""

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
                             args=(self.transport, self.plugins, self.table(), ep, i, n,
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
