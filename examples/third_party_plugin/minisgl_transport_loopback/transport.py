"""``loopback``: the zmq transport, but every channel is a TCP port on 127.0.0.1.

It wraps the installed ``zmq`` transport and changes one thing, where channels live: ipc paths
become ports. The port of a channel is chosen once and written into the run directory (the
core's ``tcp_endpoint``), so every process of a run that asks for ``endpoint(run_dir, channel)``
gets the same address.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from minisgl_core.api import Receiver, Sender, tcp_endpoint

_HOST = "127.0.0.1"


class LoopbackTransport:
    """Delegates to ``ZmqTransport`` (its options table too); only ``endpoint`` differs."""

    name: ClassVar[str] = "loopback"
    multiprocess: ClassVar[bool] = True

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        from minisgl_transport_zmq.transport import ZmqTransport  # imports zmq: keep it here

        self._inner = ZmqTransport(options)

    def endpoint(self, run_dir: Path, channel: str) -> str:
        return tcp_endpoint(run_dir, channel, host=_HOST)

    def push(self, endpoint: str, *, bind: bool = False) -> Sender:
        return self._inner.push(endpoint, bind=bind)

    def pull(self, endpoint: str, *, bind: bool = True) -> Receiver:
        return self._inner.pull(endpoint, bind=bind)

    def pub(self, endpoint: str, *, bind: bool = True) -> Sender:
        return self._inner.pub(endpoint, bind=bind)

    def sub(self, endpoint: str, *, bind: bool = False) -> Receiver:
        return self._inner.sub(endpoint, bind=bind)

    def close(self) -> None:
        self._inner.close()
