"""The guard thread of an nng transport: it logs the peers nng refuses, and closes connections
that never finish their handshake.

nng refuses a peer without telling the application: the only trace is a counter in its
statistics (``auth``, ``proto``, ``reject``... of each listener and dialer). The guard reads them
every ``TICK_S`` and logs what rose. nng counts a listener's failed handshake only while the
listener has an accept pending; it re-arms that accept after each accepted pipe has run its pipe
callbacks, so the transport registers none (pynng's would wait for the GIL there, and a peer
refused meanwhile would go uncounted), and the guard lists pipes from the statistics instead.
After a refusal nng itself pauses accepting for 100 ms: a second refusal within that pause is
not counted (its connection is still closed), nor is one in the moment after a new pipe, before
nng's thread has re-armed the accept. nng 1.11 also never times out a TLS handshake
(measured: a connection that sends nothing, or half a ClientHello, stays open for good, holding a
descriptor), so every quarter of ``handshake_ms`` the guard lists this process's accepted tcp
connections (Linux ``/proc``) and shuts down any that has not become a pipe within
``handshake_ms``. Where ``/proc`` is missing only the counters are read.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynng

from minisgl_core.api import RefusalLog

log = logging.getLogger("minisgl.transport")

TICK_S = 0.25
# How long a connection the guard closed may take to show in nng's "auth" counter. Its rise is
# not counted twice meanwhile; later the closing is assumed uncounted (nng counts a failed
# handshake only while an accept is pending), so that it cannot hide a real refusal.
REAPED_SETTLE_S = 2.0
_LISTENER_REASONS = {
    "auth": "it failed TLS authentication (garbage, or no certificate from this service's keys)",
    "proto": "it does not speak the SP protocol (garbage, or not an nng peer)",
    "reject": "it is an nng socket of a kind that cannot talk to this one",
    "timeout": "its handshake timed out",
}
_DIALER_REASONS = {
    "auth": "TLS authentication failed (the two sides' keys differ?)",
    "proto": "the other side does not speak the SP protocol",
    "reject": "the other side is an nng socket of a kind that cannot talk to this one",
}


@dataclass
class _Watched:
    """One listener or dialer: where it is, and its counters as last read."""

    sock: pynng.Socket
    endpoint: str
    end: Any  # pynng.Listener or pynng.Dialer
    listener: bool
    host: str = ""  # the listener's bound address and port, to spot its accepted connections
    port: int = 0
    counts: dict[str, int] = field(default_factory=dict)


class Guard:
    """Started by a transport's first tcp channel; ``stop()`` ends it."""

    def __init__(self, handshake_ms: int) -> None:
        self._handshake_s = handshake_ms / 1000
        self._handshake_ms = handshake_ms
        self._scan_every = max(TICK_S, self._handshake_s / 4)  # /proc is read less often
        self._next_scan = 0.0
        self._refusals = RefusalLog("nng")
        self._lock = threading.Lock()
        self._watched: dict[int, _Watched] = {}
        self._first_seen: dict[int, float] = {}  # socket inode -> when it was first seen unpaired
        self._reaped: dict[int, list[float]] = {}  # listener port -> when we closed connections
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="minisgl-nng-guard", daemon=True)
        self._thread.start()

    def watch(self, sock: pynng.Socket, endpoint: str, *, listener: bool) -> None:
        """Follow the listener or dialer ``sock`` just made (its last one)."""
        end = sock.listeners[-1] if listener else sock.dialers[-1]
        w = _Watched(sock, endpoint, end, listener)
        if listener:
            address = end.local_address
            w.host, w.port = str(address).rpartition(":")[0].strip("[]"), socket.ntohs(address.port)
        with self._lock:
            self._watched[id(sock)] = w

    def forget(self, sock: pynng.Socket) -> None:
        with self._lock:
            self._watched.pop(id(sock), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - a guard that dies guards nothing: log, go on
                log.exception("transport nng: the guard's check failed")

    def _tick(self) -> None:
        with self._lock:
            watched = list(self._watched.values())
        if not watched:
            return
        all_counts, pipes = _read_stats(watched)
        for w, counts in zip(watched, all_counts, strict=True):
            reasons = _LISTENER_REASONS if w.listener else _DIALER_REASONS
            for name, reason in reasons.items():
                rose = counts.get(name, 0) - w.counts.get(name, 0)
                if name == "auth" and w.listener:  # a connection we closed also counts here
                    rose -= self._discount_reaped(w.port, rose)
                for _ in range(max(0, rose)):
                    (self._refusals.refused if w.listener else self._refusals.failed)(
                        w.endpoint, reason)
            w.counts = counts
        if time.monotonic() >= self._next_scan:
            self._next_scan = time.monotonic() + self._scan_every
            self._reap_stalled([w for w in watched if w.listener], pipes)

    def _discount_reaped(self, port: int, rose: int) -> int:
        """How many of ``rose`` new "auth" refusals on ``port`` are connections we closed."""
        recent = [t for t in self._reaped.get(port, []) if time.monotonic() - t < REAPED_SETTLE_S]
        discount = min(rose, len(recent))
        self._reaped[port] = recent[discount:]
        return discount

    def _reap_stalled(self, listeners: list[_Watched], pipes: dict[int, list[int]]) -> None:
        """Shut down accepted connections that are no pipe after ``handshake_ms``."""
        if not listeners:
            return
        connections = accepted_connections({w.port for w in listeners})
        now = time.monotonic()
        for inode in list(self._first_seen):
            if inode not in connections:
                del self._first_seen[inode]
        paired: dict[int, set[int]] = {}
        for inode, (fd, local_ip, local_port, peer_ip, peer_port) in connections.items():
            owner = next((w for w in listeners if w.port == local_port
                          and w.host in (local_ip, "0.0.0.0", "::")), None)
            if owner is None:
                continue
            if local_port not in paired:
                paired[local_port] = _pipe_ports(pipes.get(owner.end.id, []))
            if peer_port in paired[local_port]:
                self._first_seen.pop(inode, None)
                continue
            first = self._first_seen.setdefault(inode, now)
            if now - first >= self._handshake_s and _shut_down(fd, inode):
                del self._first_seen[inode]
                self._reaped.setdefault(local_port, []).append(now)
                self._refusals.refused(owner.endpoint, f"no handshake within handshake_ms="
                                       f"{self._handshake_ms}; closed", f"{peer_ip}:{peer_port}")


def _read_stats(watched: list[_Watched]) -> tuple[list[dict[str, int]], dict[int, list[int]]]:
    """Each listener's or dialer's statistics counters, and the pipe ids of each listener (by
    listener id), from one snapshot."""
    lib, ffi = pynng.lib, pynng.ffi
    root = ffi.new("nng_stat **")
    pynng.check_err(lib.nng_stats_get(root))
    try:
        out = []
        for w in watched:
            node = (lib.nng_stat_find_listener(root[0], w.end.listener) if w.listener
                    else lib.nng_stat_find_dialer(root[0], w.end.dialer))
            counts = stat_values(node, lib.NNG_STAT_COUNTER) if node != ffi.NULL else {}
            out.append(counts or w.counts)  # a closed end keeps its last counts: no false rise
        pipes: dict[int, list[int]] = {}
        item = lib.nng_stat_child(root[0])
        while item != ffi.NULL:  # the top level: a scope per socket, listener, dialer, pipe
            if ffi.string(lib.nng_stat_name(item)) == b"pipe":
                ids = stat_values(item, lib.NNG_STAT_ID)
                if "listener" in ids:
                    pipes.setdefault(ids["listener"], []).append(ids["id"])
            item = lib.nng_stat_next(item)
        return out, pipes
    finally:
        lib.nng_stats_free(root[0])


def stat_values(node: Any, kind: int) -> dict[str, int]:
    """name -> value of the statistics of type ``kind`` directly under ``node``."""
    lib, ffi = pynng.lib, pynng.ffi
    values: dict[str, int] = {}
    child = lib.nng_stat_child(node)
    while child != ffi.NULL:
        if lib.nng_stat_type(child) == kind:
            values[ffi.string(lib.nng_stat_name(child)).decode()] = lib.nng_stat_value(child)
        child = lib.nng_stat_next(child)
    return values


def _pipe_ports(pipe_ids: list[int]) -> set[int]:
    """The peers' ports of these pipes (connections that finished their handshake); a pipe
    closed meanwhile has none (its connection is closing too)."""
    lib, ffi = pynng.lib, pynng.ffi
    ports = set()
    for pipe_id in pipe_ids:
        pipe = ffi.new("nng_pipe *")
        pipe.id = pipe_id
        address = ffi.new("nng_sockaddr *")
        if lib.nng_pipe_get_addr(pipe[0], b"remote-address", address) == 0:
            inet = address.s_in6 if address.s_family == lib.NNG_AF_INET6 else address.s_in
            ports.add(socket.ntohs(inet.sa_port))
    return ports


def accepted_connections(ports: set[int]) -> dict[int, tuple[int, str, int, str, int]]:
    """This process's established tcp connections whose local port is in ``ports``:
    socket inode -> (fd, local ip, local port, peer ip, peer port). Empty without ``/proc``."""
    fds = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return {}
    for name in names:
        try:
            link = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            fds[int(link[8:-1])] = int(name)
    out = {}
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            inode = int(cols[9])
            local_ip, local_port = _address(cols[1])
            if cols[3] == "01" and local_port in ports and inode in fds:  # 01: ESTABLISHED
                out[inode] = (fds[inode], local_ip, local_port, *_address(cols[2]))
    return out


def _address(text: str) -> tuple[str, int]:
    """("127.0.0.1", 5600) from /proc/net/tcp's "0100007F:15E0" (words in host byte order)."""
    hex_ip, _, hex_port = text.rpartition(":")
    raw = b"".join(bytes.fromhex(hex_ip[i:i + 8])[::-1] for i in range(0, len(hex_ip), 8))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, raw), int(hex_port, 16)


def _shut_down(fd: int, inode: int) -> bool:
    """Shut the connection on ``fd`` down (nng then closes it), if ``fd`` is still that socket."""
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != f"socket:[{inode}]":
            return False
        with socket.socket(fileno=os.dup(fd)) as dup:
            dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        return False
    return True
