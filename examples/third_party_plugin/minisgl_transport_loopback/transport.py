"""``loopback``: the zmq transport, but every channel is a TCP port on 127.0.0.1.

It wraps the installed ``zmq`` transport and changes one thing, where channels live: ipc paths
become ports. The port of a channel is chosen once and written into the run directory, so every
process of a run that asks for ``endpoint(run_dir, channel)`` gets the same address.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from minisgl_core.api import Receiver, Sender, check_channel

_HOST = "127.0.0.1"
_handed_out: set[int] = set()  # ports this process already assigned (never hand one out twice)
_lock = threading.Lock()


def _free_port() -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((_HOST, 0))
            port: int = probe.getsockname()[1]
        with _lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def _port_for(run_dir: Path, channel: str) -> int:
    """The channel's port, agreed through ``<run_dir>/<channel>.port`` (first writer wins)."""
    final = Path(run_dir) / f"{check_channel(channel)}.port"
    if not final.exists():
        tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(str(_free_port()))
        try:
            os.link(tmp, final)  # atomic: exactly one process creates the file
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return int(final.read_text())


class LoopbackTransport:
    """Delegates to ``ZmqTransport`` (its options table too); only ``endpoint`` differs."""

    name: ClassVar[str] = "loopback"
    multiprocess: ClassVar[bool] = True

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        from minisgl_transport_zmq.transport import ZmqTransport  # imports zmq: keep it here

        self._inner = ZmqTransport(options)

    def endpoint(self, run_dir: Path, channel: str) -> str:
        return f"tcp://{_HOST}:{_port_for(run_dir, channel)}"

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
