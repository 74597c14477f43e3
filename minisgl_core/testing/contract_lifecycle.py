"""Transport contract, lifecycle: timeouts, close, binding and the high-water mark."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from minisgl_core.interfaces import AddressInUse, ChannelClosed, Receiver, Sender, Transport
from minisgl_core.service.rundir import ipc_path
from minisgl_core.testing import transports as h
from minisgl_core.testing.contract_base import ContractBase


class LifecycleCases(ContractBase):
    """Receives time out, close wakes everyone, binds are exclusive, buffers are bounded."""

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
        deadline = time.monotonic() + 60
        while pump.is_alive() or got < pump.sent:
            try:
                msg = rx.recv(timeout=0.2)
            except TimeoutError:  # the pump may be done but not yet reported dead: ask again
                assert time.monotonic() < deadline, f"drain stuck at {got} of {pump.sent}"
                continue
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


def _raises(fn: Any) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:
        return exc
    return None
