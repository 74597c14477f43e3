"""Default plugin: the ``inproc`` transport, threads and asyncio tasks inside one process.

Endpoints (``inproc://<run_dir>/<channel>``) live in a process-wide table
(``inproc_channels``), so every ``InprocTransport`` of a process reaches the same channels, as
the processes of a service would. A pipeline buffers ``hwm`` messages before ``send`` blocks; a
publisher gives every subscriber its own ``hwm``-deep queue and drops what a full one cannot
take. Only threading and collections are imported, so the plugin stays cheap to load.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from minisgl_core.default_plugins.inproc_channels import (
    Box,
    End,
    PipeReceiver,
    PipeSender,
    PubSender,
    SubReceiver,
    acquire,
)
from minisgl_core.interfaces import ChannelClosed
from minisgl_core.plugin.hookspecs import Register, hookimpl
from minisgl_core.plugin.transport_util import TransportOptions
from minisgl_core.service.rundir import check_channel

__all__ = ["InprocTransport"]


@hookimpl
def minisgl_register_transports(register: Register) -> None:
    register("inproc", "minisgl_core.default_plugins.inproc:InprocTransport")


class InprocTransport:
    """Channels between threads and asyncio tasks of one process (``multiprocess = False``)."""

    name: ClassVar[str] = "inproc"
    multiprocess: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = TransportOptions.from_mapping(self.name, options)
        self._ends: set[End] = set()
        self._lock = threading.Lock()
        self._closed = False

    def endpoint(self, run_dir: Path, channel: str) -> str:
        return f"inproc://{Path(run_dir).absolute()}/{check_channel(channel)}"

    def _open(self, cls: type[End], endpoint: str, kind: str, bind: bool) -> Any:
        with self._lock:
            if self._closed:
                raise ChannelClosed("transport inproc is closed")
        ep = acquire(endpoint, kind, bind, self.options.hwm)
        box = ep.box
        if cls is SubReceiver:
            box = Box(ep.lock, self.options.hwm)
            with ep.lock:
                box.readers = 1
                ep.subs.append(box)
        end = cls(endpoint, ep, box, bind, self.options.max_message_bytes, self._forget)
        if isinstance(end, PipeReceiver):
            end.attach()
        with self._lock:
            self._ends.add(end)
        return end

    def push(self, endpoint: str, *, bind: bool = False) -> PipeSender:
        return self._open(PipeSender, endpoint, "pipeline", bind)  # type: ignore[no-any-return]

    def pull(self, endpoint: str, *, bind: bool = True) -> PipeReceiver:
        return self._open(PipeReceiver, endpoint, "pipeline", bind)  # type: ignore[no-any-return]

    def pub(self, endpoint: str, *, bind: bool = True) -> PubSender:
        return self._open(PubSender, endpoint, "fanout", bind)  # type: ignore[no-any-return]

    def sub(self, endpoint: str, *, bind: bool = False) -> SubReceiver:
        return self._open(SubReceiver, endpoint, "fanout", bind)  # type: ignore[no-any-return]

    def _forget(self, end: End) -> None:
        with self._lock:
            self._ends.discard(end)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ends, self._ends = list(self._ends), set()
        for end in ends:
            end.close()
