"""CURVE for zmq tcp endpoints: the key files, the socket options, and the guard thread.

Every process of a service holds the same four files (``minisgl keys new``): the server keypair,
which every binding socket uses, and the client keypair, which every connecting socket uses.
A binder accepts a client only if it proves the client secret (its public key is checked by
the ZAP handler below: without a ZAP handler, zmq accepts any client that knows the server's
public key). The guard thread of a transport answers ZAP requests (for every tcp binder, with
keys or without) and reads the monitor events of its tcp sockets, to log what zmq refuses
silently: a wrong key, a peer speaking no CURVE, garbage, or a handshake that never completes.
"""

from __future__ import annotations

import datetime
import errno
import itertools
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from minisgl_core.api import RefusalLog, read_private, write_private

log = logging.getLogger("minisgl.transport")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by the ZAP specification (RFC 27)
_CRYPTOGRAPHIC = 0x11000001  # ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
_MECHANISM_MISMATCH = 0x11000002  # ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
_BINDER_EVENTS = (zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
                  | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                  | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_CONNECTER_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_monitor_ids = itertools.count()
CURVE_OVERHEAD = 256  # a MESSAGE command's name, nonce, MAC and flags, with room to spare


# ---- keys ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CurveKeys:
    """The service's two CURVE keypairs, Z85-encoded (40 characters each)."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def load(cls, directory: Path) -> CurveKeys:
        """Read ``server.key_secret`` and ``client.key_secret``; ValueError naming a bad file."""
        server = _read_certificate(directory / "server.key_secret")
        client = _read_certificate(directory / "client.key_secret")
        return cls(*server, *client)


def _read_certificate(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a zmq certificate file (the format ``zmq.auth`` writes)."""
    found: dict[bytes, bytes] = {}
    for line in read_private(path, "zmq").splitlines():
        key, sep, value = line.strip().partition(b"=")
        if sep and key.strip() in (b"public-key", b"secret-key"):
            found[key.strip()] = value.strip().strip(b"'\"")
    public, secret = found.get(b"public-key", b""), found.get(b"secret-key", b"")
    if len(public) != 40 or len(secret) != 40:
        raise ValueError(f"transport 'zmq': {path} holds no CURVE keypair (40-character Z85 "
                         f"public-key and secret-key)")
    return public, secret


def write_keys(directory: Path) -> list[Path]:
    """``minisgl keys new``: a server and a client keypair, as zmq certificate files (0600)."""
    written = []
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    for name in ("server", "client"):
        public, secret = zmq.curve_keypair()
        head = f"#   minisgl zmq CURVE {name} certificate, made {stamp}\nmetadata\ncurve\n"
        pub_line = f'    public-key = "{public.decode()}"\n'
        written.append(write_private(directory / f"{name}.key", (head + pub_line).encode()))
        sec_line = f'    secret-key = "{secret.decode()}"\n'
        written.append(write_private(directory / f"{name}.key_secret",
                                     (head + pub_line + sec_line).encode()))
    return written


def tcp_socket_options(keys: CurveKeys | None, *, bind: bool, endpoint: str,
                       handshake_ms: int, limit: int | None) -> dict[int, Any]:
    """What a tcp socket gets on top of ``channel.socket_options``: CURVE when there are keys.

    ``limit`` is the receive limit of a receiving socket (None for senders).
    """
    opts: dict[int, Any] = {
        zmq.IPV6: 1,  # lets one socket use IPv4 and IPv6 addresses alike
        zmq.HANDSHAKE_IVL: handshake_ms,  # zmq's default is 30 s; a silent peer is closed then
    }
    if bind:
        # A ZAP domain makes zmq ask the guard about every peer, and refuse peers that speak
        # the unversioned ZMTP 1.0 (which plain zmq accepts: garbage could pass for messages).
        opts[zmq.ZAP_DOMAIN] = endpoint.encode()
    if keys is None:
        return opts
    if limit:
        # zmq checks MAXMSGSIZE against the encrypted frame: leave room for CURVE's envelope
        opts[zmq.MAXMSGSIZE] = limit + CURVE_OVERHEAD
    if bind:
        opts[zmq.CURVE_SERVER] = 1
        opts[zmq.CURVE_SECRETKEY] = keys.server_secret
    else:
        opts[zmq.CURVE_SERVERKEY] = keys.server_public
        opts[zmq.CURVE_PUBLICKEY] = keys.client_public
        opts[zmq.CURVE_SECRETKEY] = keys.client_secret
    return opts


# ---- the guard thread ---------------------------------------------------------------------------


@dataclass
class _Watched:
    """One monitored socket: its endpoint, its side, and the handshakes seen on it."""

    endpoint: str
    bound: bool
    succeeded: int = 0
    failed: int = 0
    # fd -> (succeeded, failed, when) when it was accepted: if neither count moved by the time
    # the fd disconnects, that connection never reached a handshake (garbage, or a non-zmq
    # peer); ``when`` (monotonic s, inf once its timeout is reported) dates its handshake timer
    accepted: dict[int, tuple[int, int, float]] | None = None

    def timed_out(self, handshake_ms: int) -> bool:
        """Whether a connection accepted here has waited ``handshake_ms`` for its handshake (the
        oldest such is then counted as reported). libzmq reports its handshake timer with
        whatever errno its I/O thread last set (EPROTO after a garbage peer's protocol error),
        so the event's value alone cannot say it was the timer."""
        if not self.accepted:
            return False
        fd, (ok, bad, when) = min(self.accepted.items(), key=lambda item: item[1][2])
        if time.monotonic() - when < 0.9 * handshake_ms / 1000:  # 0.9: the timer's own slack
            return False
        self.accepted[fd] = (ok, bad, math.inf)
        return True


class Guard:
    """One thread per transport: the ZAP handler (with keys) and the tcp sockets' monitors."""

    def __init__(self, ctx: zmq.Context[Any], keys: CurveKeys | None, handshake_ms: int) -> None:
        self._ctx = ctx
        self._handshake_ms = handshake_ms
        self._allowed = {keys.client_public} if keys else None  # None: no keys, NULL security
        self._refusals = RefusalLog("zmq")
        self._zap = ctx.socket(zmq.REP)  # bound before any tcp socket binds
        self._zap.linger = 0
        self._zap.bind(ZAP_ENDPOINT)
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()
        self._new: list[tuple[str, _Watched]] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="minisgl-zmq-guard", daemon=True)
        self._thread.start()

    def watch(self, sock: zmq.Socket[bytes], endpoint: str, *, bound: bool) -> None:
        """Monitor ``sock`` (call before it binds or connects, so no event is missed)."""
        address = f"inproc://minisgl-monitor-{os.getpid()}-{next(_monitor_ids)}"
        sock.monitor(address, _BINDER_EVENTS if bound else _CONNECTER_EVENTS)
        watched = _Watched(endpoint, bound, accepted={} if bound else None)
        with self._lock:
            self._new.append((address, watched))
        os.write(self._wake_w, b"w")

    def stop(self) -> None:
        """End the thread and close its sockets; idempotent."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        os.write(self._wake_w, b"s")
        self._thread.join(10)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._wake_r, zmq.POLLIN)
        poller.register(self._zap, zmq.POLLIN)
        monitors: dict[zmq.Socket[bytes], _Watched] = {}
        try:
            while not self._stopping:
                for item, _ in poller.poll():
                    if item == self._wake_r:
                        os.read(self._wake_r, 4096)
                        self._adopt(poller, monitors)
                    elif item is self._zap:
                        self._answer_zap()
                    elif not self._on_event(item, monitors[item]):
                        poller.unregister(item)
                        monitors.pop(item).close(linger=0)
        except zmq.ZMQError as exc:  # the context went away under us: nothing left to guard
            if exc.errno not in (zmq.ETERM, zmq.ENOTSOCK):
                log.exception("transport zmq: the guard thread stopped")
        finally:
            for mon in monitors:
                mon.close(linger=0)
            self._zap.close(linger=0)

    def _adopt(self, poller: zmq.Poller, monitors: dict[zmq.Socket[bytes], _Watched]) -> None:
        with self._lock:
            new, self._new = self._new, []
        for address, watched in new:
            mon = self._ctx.socket(zmq.PAIR)
            mon.linger = 0
            mon.connect(address)
            poller.register(mon, zmq.POLLIN)
            monitors[mon] = watched

    def _answer_zap(self) -> None:
        frames = self._zap.recv_multipart()
        version, request_id, domain, address, _identity, mechanism = frames[:6]
        credentials = frames[6:]
        if self._allowed is None:
            ok = mechanism == b"NULL"
        else:
            ok = (mechanism == b"CURVE" and len(credentials) == 1
                  and z85.encode(credentials[0]) in self._allowed)
        if not ok:
            peer = address.decode(errors="replace").removeprefix("::ffff:")  # IPV6=1: v4-mapped
            self._refusals.refused(domain.decode(errors="replace"),
                                   "its CURVE client key is not this service's (keys from "
                                   "another `minisgl keys new`?)", peer)
        self._zap.send_multipart([version, request_id, b"200" if ok else b"400",
                                  b"OK" if ok else b"client key not allowed", b"", b""])

    def _on_event(self, mon: zmq.Socket[bytes], w: _Watched) -> bool:
        """Handle one monitor event; False once the monitored socket has closed."""
        event = parse_monitor_message(mon.recv_multipart())
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_MONITOR_STOPPED:
            return False
        if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            w.succeeded += 1
        elif kind & (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH):
            w.failed += 1
            timer = (kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and w.bound
                     and w.timed_out(self._handshake_ms))
            reason = _reason(kind, value, w.bound, self._handshake_ms, timer)
            if reason is not None:
                (self._refusals.refused if w.bound else self._refusals.failed)(w.endpoint, reason)
        elif w.accepted is not None and kind == zmq.EVENT_ACCEPTED:
            w.accepted[value] = (w.succeeded, w.failed, time.monotonic())
        elif w.accepted is not None and kind == zmq.EVENT_DISCONNECTED:
            ok, bad, _ = w.accepted.pop(value, (-1, -1, 0.0))
            if (ok, bad) == (w.succeeded, w.failed):
                self._refusals.refused(w.endpoint, "it closed or was closed before any "
                                                   "handshake (not a zmq peer, or garbage)")
        return True


def _reason(kind: int, value: int, bound: bool, handshake_ms: int, timer: bool = False
            ) -> str | None:
    """Why a handshake failed, in words; None when the ZAP handler has said it already.
    ``timer``: a connection has waited out the handshake timer (whatever ``value`` says)."""
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return None if bound else "the other side refused our key (keys differ?)"
    if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == _CRYPTOGRAPHIC:
            return "the CURVE handshake failed: the server keys differ"
        if value == _MECHANISM_MISMATCH:
            return "one side uses CURVE and the other does not (keys set on one side only?)"
        return f"zmq protocol error 0x{value:08x}"
    if timer or value in (0, errno.EAGAIN):  # the handshake timer ran out
        return f"no handshake within handshake_ms={handshake_ms}"
    return f"the handshake broke off ({os.strerror(value)})"
