"""The zmq transport: one zmq.Context per transport, PUSH/PULL pipelines and PUB/SUB fan-out.

Endpoints are ``ipc://<run_dir>/<channel>``; explicit ``tcp://host:port`` endpoints work too.
Buffering: a pipeline holds about SNDHWM + RCVHWM messages (``hwm`` each, default 1000) plus
what fits in the kernel socket buffers; then ``send`` blocks until the receiver reads. A PUB
socket drops new messages for a subscriber that is ``hwm`` behind and never blocks.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import zmq

from minisgl_core.api import (
    AddressInUse,
    ChannelClosed,
    TransportOptions,
    claim_ipc_path,
    ipc_endpoint,
    ipc_path,
)
from minisgl_transport_zmq.channel import (
    BIND_LOCK,
    ZmqReceiver,
    ZmqSender,
    _Channel,
    socket_options,
)


class ZmqTransport:
    """pyzmq sockets behind the minisgl Transport protocol."""

    name: ClassVar[str] = "zmq"
    multiprocess: ClassVar[bool] = True

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = TransportOptions.from_mapping(self.name, options)
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._channels: set[_Channel] = set()
        self._closed = False

    def endpoint(self, run_dir: Path, channel: str) -> str:
        return ipc_endpoint(run_dir, channel)

    def push(self, endpoint: str, *, bind: bool = False) -> ZmqSender:
        return self._open(ZmqSender, zmq.PUSH, endpoint, bind)  # type: ignore[return-value]

    def pull(self, endpoint: str, *, bind: bool = True) -> ZmqReceiver:
        return self._open(ZmqReceiver, zmq.PULL, endpoint, bind)  # type: ignore[return-value]

    def pub(self, endpoint: str, *, bind: bool = True) -> ZmqSender:
        return self._open(ZmqSender, zmq.PUB, endpoint, bind)  # type: ignore[return-value]

    def sub(self, endpoint: str, *, bind: bool = False) -> ZmqReceiver:
        return self._open(ZmqReceiver, zmq.SUB, endpoint, bind)  # type: ignore[return-value]

    def _open(self, cls: type[_Channel], kind: int, endpoint: str, bind: bool) -> _Channel:
        with self._lock:
            if self._closed:
                raise ChannelClosed(f"transport {self.name} is closed")
            sock = self._ctx.socket(kind)
        try:
            opts = self.options
            for opt, value in socket_options(kind, bind=bind, hwm=opts.hwm,
                                             limit=opts.max_message_bytes,
                                             reconnect_ms=opts.reconnect_ms).items():
                sock.setsockopt(opt, value)
            if kind == zmq.SUB:
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            bound_file = None
            if bind:
                bound_file = self._bind(sock, endpoint)
            else:
                sock.connect(endpoint)
            events = zmq.POLLIN if cls is ZmqReceiver else zmq.POLLOUT
            channel = cls(sock, endpoint, opts.max_message_bytes, self._forget, events)
            channel.bound_file = bound_file
            if bind and endpoint.startswith("tcp://"):
                channel.bound_tcp = _host_port(sock.getsockopt_string(zmq.LAST_ENDPOINT))
        except BaseException:
            sock.close(linger=0)
            raise
        with self._lock:
            self._channels.add(channel)
        return channel

    @staticmethod
    def _bind(sock: zmq.Socket[bytes], endpoint: str) -> tuple[str, int, int] | None:
        """Bind, refusing a live ipc path; return the socket file's identity (ipc only)."""
        with BIND_LOCK:
            claim_ipc_path(endpoint)
            try:
                sock.bind(endpoint)
            except zmq.ZMQError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise AddressInUse(errno.EADDRINUSE, f"{endpoint} is already bound") from exc
                raise
            path = ipc_path(endpoint)
            if path is None:
                return None
            st = os.stat(path)
            return path, st.st_dev, st.st_ino

    def _forget(self, channel: _Channel) -> None:
        with self._lock:
            self._channels.discard(channel)

    def close(self) -> None:
        """Close every channel (waking blocked ones), then the context; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            channels = list(self._channels)
        for channel in channels:
            channel.close()
        self._ctx.destroy(linger=0)


def _host_port(endpoint: str) -> tuple[str, int]:
    """("127.0.0.1", 5555) from "tcp://127.0.0.1:5555" (brackets of IPv6 hosts removed)."""
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    return host.strip("[]"), int(port)
