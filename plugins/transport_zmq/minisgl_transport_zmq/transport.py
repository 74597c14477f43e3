"""The zmq transport: one zmq.Context per transport, PUSH/PULL pipelines and PUB/SUB fan-out.

Endpoints are ``ipc://<run_dir>/<channel>``, or ``tcp://host:port`` with ``endpoints = "tcp"``
(explicit tcp endpoints work either way); with ``keys`` every tcp socket uses CURVE
(``security.py``), and without keys tcp is refused unless it stays on loopback.
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
    NetworkOptions,
    check_tcp_endpoint,
    claim_ipc_path,
    ipc_endpoint,
    ipc_path,
    note_plaintext,
    split_tcp,
    tcp_endpoint,
)
from minisgl_transport_zmq.channel import (
    BIND_LOCK,
    ZmqReceiver,
    ZmqSender,
    _Channel,
    socket_options,
)
from minisgl_transport_zmq.security import CurveKeys, Guard, tcp_socket_options, write_keys


class ZmqTransport:
    """pyzmq sockets behind the minisgl Transport protocol."""

    name: ClassVar[str] = "zmq"
    multiprocess: ClassVar[bool] = True
    write_keys = staticmethod(write_keys)  # what `minisgl keys new` writes for zmq

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = NetworkOptions.from_mapping(self.name, options)
        key_dir = self.options.key_dir(self.name)
        self._keys = CurveKeys.load(key_dir) if key_dir else None
        if self.options.tcp and self._keys is None:
            note_plaintext(self.name, self.options.host)
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._channels: set[_Channel] = set()
        self._guard: Guard | None = None  # started by the first tcp socket
        self._closed = False

    def endpoint(self, run_dir: Path, channel: str) -> str:
        opts = self.options
        if opts.tcp:
            return tcp_endpoint(run_dir, channel, host=opts.host, first_port=opts.ports.first,
                                last_port=opts.ports.last)
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
        tcp = split_tcp(endpoint)
        if tcp is not None:
            if tcp[0] != "tcp":
                raise ValueError(f"zmq has no {tcp[0]}:// endpoints (CURVE secures tcp://)")
            check_tcp_endpoint(self.name, endpoint, self._keys is not None)
        with self._lock:
            if self._closed:
                raise ChannelClosed(f"transport {self.name} is closed")
            sock = self._ctx.socket(kind)
            if tcp is not None and self._guard is None:
                self._guard = Guard(self._ctx, self._keys, self.options.handshake_ms)
            guard = self._guard
        try:
            opts = self.options
            sock_opts = socket_options(kind, bind=bind, hwm=opts.hwm,
                                       limit=opts.max_message_bytes, reconnect_ms=opts.reconnect_ms)
            if tcp is not None:
                sock_opts.update(tcp_socket_options(
                    self._keys, bind=bind, endpoint=endpoint, handshake_ms=opts.handshake_ms,
                    limit=sock_opts.get(zmq.MAXMSGSIZE)))
            for opt, value in sock_opts.items():
                sock.setsockopt(opt, value)
            if tcp is not None and guard is not None:
                guard.watch(sock, endpoint, bound=bind)
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
        if self._guard is not None:
            self._guard.stop()
        self._ctx.destroy(linger=0)


def _host_port(endpoint: str) -> tuple[str, int]:
    """("127.0.0.1", 5555) from "tcp://127.0.0.1:5555" (brackets of IPv6 hosts removed)."""
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    return host.strip("[]"), int(port)
