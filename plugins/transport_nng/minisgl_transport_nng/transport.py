"""The nng transport: pynng Push0/Pull0 pipelines and Pub0/Sub0 fan-out, one socket per end.

nng sockets are thread-safe and ``nng_close`` fails every pending operation with ``Closed``,
which is exactly the contract's close-wakes-receivers rule, so channels map almost 1:1 onto
pynng. What is set explicitly, and why (see docs/transports.md):

- ``dial(block=False)``: a blocking dial to an absent peer logs an ERROR traceback first;
- ``reconnect_time_min`` 20 ms (nng's default is 1 s: a late receiver would wait that long);
- ``send_buffer_size`` / ``recv_buffer_size`` = ``hwm`` (at most 8192): nng's default send
  buffer is 0, and Pub0's 16-deep per-pipe queue drops under any burst;
- ``recv_max_size`` = ``max_message_bytes`` (pynng's docstring says 1 MB, nng 1.11 means
  unlimited); the sender checks the same limit so nothing oversize is ever sent.

Buffering: a pipeline holds about ``hwm`` messages in the sender's buffer, one per pipe at the
receiver, plus the kernel's socket buffers; then ``send`` blocks. Pub0 never blocks; it drops
the oldest messages of a subscriber that is ``hwm`` behind.

With ``endpoints = "tcp"`` channels are ``tcp://host:port``, or ``tls+tcp://`` with ``keys``
(mutual TLS, ``keys.py``: with keys every tcp endpoint is opened as TLS); ``guard.py`` logs the
peers nng refuses and closes handshakes that stall; ``teardown.py`` says in which order a
transport closes, and why every transport is closed before the interpreter exits.
"""

from __future__ import annotations

import errno
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pynng

from minisgl_core.api import (
    AddressInUse,
    ChannelClosed,
    NetworkOptions,
    check_size,
    check_tcp_endpoint,
    ipc_endpoint,
    keys_hint,
    note_plaintext,
    split_tcp,
    tcp_endpoint,
)
from minisgl_transport_nng.guard import Guard
from minisgl_transport_nng.keys import TlsKeys, write_keys
from minisgl_transport_nng.teardown import (
    close_at_exit,
    closed,
    quiet_dialers,
    wait_reaped,
    without_pipe_callbacks,
)

_NNG_MAX_BUFFER = 8192  # nng refuses larger send/recv buffer sizes
# pynng 0.9's sync recv of an empty message fails in ffi.unpack(NULL, 0) with a RuntimeError after
# nng delivered it (nothing was allocated, so nothing leaks): that error means b"".
_EMPTY = RuntimeError


class _Channel:
    def __init__(self, sock: pynng.Socket, endpoint: str, owner: NngTransport,
                 listens: bool) -> None:
        self._sock = sock
        self.endpoint = endpoint
        self.listens = listens
        self._owner = owner
        self._limit = owner.options.max_message_bytes
        self._closed = False

    def _closed_error(self) -> ChannelClosed:
        return ChannelClosed(f"channel {self.endpoint} is closed")

    def close(self) -> None:
        """Idempotent; nng fails any blocked send/recv (sync or async) with Closed."""
        if self._closed:
            return
        self._closed = True
        self._owner._forget(self)  # first: the guard must not read a closing socket
        self._sock.close()


class NngSender(_Channel):
    """The sending end of a Push0 or Pub0 socket."""

    def send(self, data: bytes) -> None:
        check_size(data, self._limit)
        if self._closed:
            raise self._closed_error()
        try:
            self._sock.send(data)
        except pynng.Closed:
            raise self._closed_error() from None

    async def asend(self, data: bytes) -> None:
        check_size(data, self._limit)
        if self._closed:
            raise self._closed_error()
        try:
            await self._sock.asend(data)
        except pynng.Closed:
            raise self._closed_error() from None


class NngReceiver(_Channel):
    """The receiving end of a Pull0 or Sub0 socket."""

    def __init__(self, sock: pynng.Socket, endpoint: str, owner: NngTransport,
                 listens: bool) -> None:
        super().__init__(sock, endpoint, owner, listens)
        self._timeout_ms = -1  # the socket's current recv_timeout; set only when it changes

    def recv(self, timeout: float | None = None) -> bytes:
        if self._closed:
            raise self._closed_error()
        if timeout is not None and timeout <= 0:
            got = self.recv_nowait()
            if got is None:
                raise TimeoutError(f"no message on {self.endpoint}")
            return got
        ms = -1 if timeout is None else max(1, math.ceil(timeout * 1000))
        try:
            if ms != self._timeout_ms:
                self._sock.recv_timeout = ms
                self._timeout_ms = ms
            return self._sock.recv()  # type: ignore[no-any-return]
        except _EMPTY:
            return b""
        except pynng.Timeout:
            raise TimeoutError(f"no message on {self.endpoint} within {timeout} s") from None
        except pynng.Closed:
            raise self._closed_error() from None

    def recv_nowait(self) -> bytes | None:
        if self._closed:
            raise self._closed_error()
        try:
            return self._sock.recv(block=False)  # type: ignore[no-any-return]
        except _EMPTY:
            return b""
        except pynng.TryAgain:
            return None
        except pynng.Closed:
            raise self._closed_error() from None

    async def arecv(self) -> bytes:
        if self._closed:
            raise self._closed_error()
        try:
            if self._timeout_ms != -1:  # arecv obeys recv_timeout too; a recv(timeout) set it
                self._sock.recv_timeout = self._timeout_ms = -1
            return await self._sock.arecv()  # type: ignore[no-any-return]
        except pynng.Closed:
            raise self._closed_error() from None


class NngTransport:
    """pynng sockets behind the minisgl Transport protocol."""

    name: ClassVar[str] = "nng"
    multiprocess: ClassVar[bool] = True
    write_keys = staticmethod(write_keys)  # what `minisgl keys new` writes for nng

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = NetworkOptions.from_mapping(self.name, options, reconnect_ms=20)
        key_dir = self.options.key_dir(self.name)
        keys = TlsKeys.load(key_dir) if key_dir else None
        # built once: nng keeps a reference per socket, the parsed certificates are shared
        self._tls = None if keys is None else {True: keys.config(server=True),
                                               False: keys.config(server=False)}
        self._secure = keys is not None
        if self.options.tcp and keys is None:
            note_plaintext(self.name, self.options.host)
        self._lock = threading.Lock()
        self._channels: set[_Channel] = set()
        self._guard: Guard | None = None  # started by the first tcp channel
        self._closed = False
        close_at_exit(self)

    def endpoint(self, run_dir: Path, channel: str) -> str:
        opts = self.options
        if opts.tcp:
            return tcp_endpoint(run_dir, channel, host=opts.host, first_port=opts.ports.first,
                                last_port=opts.ports.last,
                                scheme="tls+tcp" if self._secure else "tcp")
        return ipc_endpoint(run_dir, channel)

    def push(self, endpoint: str, *, bind: bool = False) -> NngSender:
        return self._open(NngSender, pynng.Push0, endpoint, bind)  # type: ignore[return-value]

    def pull(self, endpoint: str, *, bind: bool = True) -> NngReceiver:
        return self._open(NngReceiver, pynng.Pull0, endpoint, bind)  # type: ignore[return-value]

    def pub(self, endpoint: str, *, bind: bool = True) -> NngSender:
        return self._open(NngSender, pynng.Pub0, endpoint, bind)  # type: ignore[return-value]

    def sub(self, endpoint: str, *, bind: bool = False) -> NngReceiver:
        return self._open(NngReceiver, pynng.Sub0, endpoint, bind)  # type: ignore[return-value]

    def _open(self, cls: type[_Channel], kind: type[pynng.Socket], endpoint: str,
              bind: bool) -> _Channel:
        tcp = split_tcp(endpoint)
        if tcp is not None:
            check_tcp_endpoint(self.name, endpoint, self._secure)
            if tcp[0] == "tls+tcp" and not self._secure:
                raise ValueError(f"transport {self.name!r}: {endpoint} needs keys; "
                                 f"{keys_hint(self.name)}")
            if tcp[0] == "tcp" and self._secure:
                endpoint = "tls+" + endpoint  # with keys, nothing leaves in clear
        with self._lock:
            if self._closed:
                raise ChannelClosed(f"transport {self.name} is closed")
            if tcp is not None and self._guard is None:
                self._guard = Guard(self.options.handshake_ms)
            guard, tls = self._guard, self._tls
        opts = self.options
        buffer = min(opts.hwm, _NNG_MAX_BUFFER)
        kwargs: dict[str, Any] = {
            "reconnect_time_min": opts.reconnect_ms,
            "reconnect_time_max": opts.reconnect_ms,  # no back-off: peers come and go quickly
            "recv_max_size": opts.max_message_bytes,
        }
        if cls is NngSender:
            kwargs["send_buffer_size"] = buffer
        else:
            kwargs["recv_buffer_size"] = buffer
        if kind is pynng.Sub0:
            kwargs["topics"] = b""  # everything; subscriptions are local in nng
        if tcp is not None and tls is not None:
            kwargs["tls_config"] = tls[bind]
        sock = kind(**kwargs)
        try:
            without_pipe_callbacks(sock)
            if bind:
                try:
                    sock.listen(endpoint)
                except pynng.AddressInUse as exc:
                    raise AddressInUse(errno.EADDRINUSE, f"{endpoint} is already bound") from exc
            else:
                sock.dial(endpoint, block=False)
            if tcp is not None and guard is not None:
                guard.watch(sock, endpoint, listener=bind)
            channel = cls(sock, endpoint, self, bind)
        except BaseException:
            sock.close()
            raise
        with self._lock:
            self._channels.add(channel)
        return channel

    def _forget(self, channel: _Channel) -> None:
        with self._lock:
            self._channels.discard(channel)
            guard = self._guard
        if guard is not None:
            guard.forget(channel._sock)

    def close_dialing(self) -> None:
        """Close the channels that dial, quieted first (teardown.py); at exit, those of every
        transport go first."""
        with self._lock:
            dialing = [channel for channel in self._channels if not channel.listens]
        self._close_dialing(dialing)

    def _close_dialing(self, dialing: list[_Channel]) -> None:
        tcp = [channel._sock for channel in dialing if split_tcp(channel.endpoint) is not None]
        if tcp:
            quiet_dialers(tcp, self.options.reconnect_ms)
        for channel in dialing:
            channel.close()

    def close(self) -> None:
        """Close every channel this transport opened, in the order of teardown.py; idempotent."""
        with self._lock:
            self._closed = True
            channels, self._channels = list(self._channels), set()
            guard, self._guard = self._guard, None
        if guard is not None:
            guard.stop()
        socket_ids = {channel._sock.socket.id for channel in channels}
        self._close_dialing([channel for channel in channels if not channel.listens])
        for channel in channels:
            channel.close()  # the listening ones; the others are closed already
        if socket_ids:
            wait_reaped(socket_ids)
        self._tls = None  # nng held its own references until its reaper was done
        closed(self)
