"""Transport contract, pub/sub: best-effort fan-out that never blocks the publisher."""

from __future__ import annotations

import threading
from pathlib import Path

from minisgl_core.interfaces import Receiver, Transport
from minisgl_core.testing import transports as h
from minisgl_core.testing.contract_base import ContractBase


class PubSubCases(ContractBase):
    """A subscriber that completed a handshake gets a low-rate stream; bursts may drop."""

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


def _recv_or_none(rx: Receiver, timeout: float) -> bytes | None:
    try:
        return rx.recv(timeout=timeout)
    except TimeoutError:
        return None
