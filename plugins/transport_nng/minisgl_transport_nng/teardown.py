"""How the nng transport tears down: its closing order, and no nng_fini at interpreter exit.

Importing pynng registers ``nng_fini`` with atexit. nng_fini frees nng's global state (the
locks of its aio expiry queues, its TLS engine) while nng's threads may still be finishing a
connection: a TLS handshake that a closed socket's peer was in the middle of sends its alert
after that, locks a destroyed mutex and aborts the process (``panic: pthread_mutex_lock:
Invalid argument``, exit code -6 after a clean stop). Closing every socket first does not
prevent it (nng does not wait for those connections), so this module replaces that handler:
at exit it closes every live transport, and nng's threads end with the process, as after
``os._exit``. pynng registered nng_fini so that its pipe callbacks would not run Python while
the interpreter exits; the transport registers none (``without_pipe_callbacks``).

A transport closes in this order: its guard thread stops, so nothing of ours calls nng
meanwhile; its tcp dialers are quieted, then their channels closed; then the listening channels
close; nng's reaper is waited for until its statistics list no endpoint or pipe of those
sockets; only then are the TLS configs released. At exit the dialers of every transport of the
process go before any listener. nng 1.11 frees a closed dialer while a dial it started (the
address lookup, the tcp connect) may still complete, and that completion then locks the freed
memory's mutex (measured: the same panic, from ``resolv_worker`` and ``tls_conn_cb``). A dialer
whose listener is still up holds a pipe and dials nothing; one without a pipe redials every
``reconnect_ms``, so ``quiet_dialers`` first moves its next redial an hour away and waits until
the dial it may have in flight has ended, which its statistics count.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import Protocol

import pynng

from minisgl_transport_nng.guard import stat_values

REAP_WAIT_S = 2.0  # nng's reaper finishes a closed socket's endpoints within milliseconds
QUIET_RECONNECT_MS = 3_600_000  # a quieted dialer's next redial: not before its socket closes
QUIET_CONNECT_S = 0.5  # beyond the old back-off, how long a dial in flight may take to end
_ENDPOINT_SCOPES = (b"listener", b"dialer", b"pipe")


class Closable(Protocol):
    def close_dialing(self) -> None: ...

    def close(self) -> None: ...


_live: set[Closable] = set()  # held strongly: a transport nobody closed is closed at exit too
_live_lock = threading.Lock()


def close_at_exit(transport: Closable) -> None:
    """Have ``transport`` closed at interpreter exit unless it is closed before."""
    with _live_lock:
        _live.add(transport)


def closed(transport: Closable) -> None:
    """``transport`` is closed: nothing of it is left for the exit."""
    with _live_lock:
        _live.discard(transport)


def _close_all() -> None:
    with _live_lock:
        transports = list(_live)
    for transport in transports:  # no dialer of this process redials a listener closed here
        transport.close_dialing()
    for transport in transports:
        transport.close()


atexit.register(_close_all)
atexit.unregister(pynng.nng._pynng_atexit)  # nng_fini: see above


def without_pipe_callbacks(sock: pynng.Socket) -> None:
    """Unregister the pipe callbacks pynng sets on every socket. nng runs them on its accept
    path before the listener accepts again, and pynng's take the GIL there: a handshake that
    fails meanwhile is not counted (guard.py). They would also run Python on nng's threads while
    the interpreter exits. Nothing of the transport uses pynng's view of pipes."""
    lib, ffi = pynng.lib, pynng.ffi
    for event in (lib.NNG_PIPE_EV_ADD_PRE, lib.NNG_PIPE_EV_ADD_POST, lib.NNG_PIPE_EV_REM_POST):
        pynng.check_err(lib.nng_pipe_notify(sock.socket, event, ffi.NULL, ffi.NULL))


def quiet_dialers(socks: list[pynng.Socket], reconnect_ms: int) -> None:
    """Stop the redialing of the dialers of ``socks`` that have no pipe, and wait until the
    dial each may have had in flight has ended (its outcome counted in its statistics), at
    most ``reconnect_ms`` (the back-off it may have armed) plus ``QUIET_CONNECT_S``."""
    dialers = [dialer for sock in socks for dialer in sock.dialers]
    waiting = [d for d, stats in zip(dialers, _dialer_stats(dialers), strict=True)
               if stats is not None and not stats[0]]
    for dialer in waiting:
        dialer.reconnect_time_min = dialer.reconnect_time_max = QUIET_RECONNECT_MS
    # counted after the change: an outcome counted from now on was followed by the long
    # back-off, so no dial can be in flight after it
    outcomes = [stats[1] if stats else 0 for stats in _dialer_stats(waiting)]
    deadline = time.monotonic() + reconnect_ms / 1000 + QUIET_CONNECT_S
    while waiting and time.monotonic() < deadline:
        time.sleep(0.002)
        still = [(d, before) for d, before, now in zip(waiting, outcomes, _dialer_stats(waiting),
                                                       strict=True)
                 if now is not None and not now[0] and now[1] <= before]
        waiting, outcomes = [d for d, _ in still], [before for _, before in still]


def _dialer_stats(dialers: list[pynng.Dialer]) -> list[tuple[int, int] | None]:
    """(pipes, counted dial outcomes) of each dialer, from one snapshot; None: it is gone."""
    lib, ffi = pynng.lib, pynng.ffi
    root = ffi.new("nng_stat **")
    pynng.check_err(lib.nng_stats_get(root))
    try:
        out: list[tuple[int, int] | None] = []
        for dialer in dialers:
            node = lib.nng_stat_find_dialer(root[0], dialer.dialer)
            if node == ffi.NULL:
                out.append(None)
                continue
            pipes = stat_values(node, lib.NNG_STAT_LEVEL).get("pipes", 0)
            out.append((pipes, sum(stat_values(node, lib.NNG_STAT_COUNTER).values())))
        return out
    finally:
        lib.nng_stats_free(root[0])


def wait_reaped(socket_ids: set[int], timeout: float = REAP_WAIT_S) -> bool:
    """Wait until nng's statistics list no listener, dialer or pipe of the (closed) sockets
    ``socket_ids``: its reaper has finished them. False if some are left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while _endpoints_left(socket_ids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
    return True


def _endpoints_left(socket_ids: set[int]) -> bool:
    lib, ffi = pynng.lib, pynng.ffi
    root = ffi.new("nng_stat **")
    pynng.check_err(lib.nng_stats_get(root))
    try:
        item = lib.nng_stat_child(root[0])
        while item != ffi.NULL:  # the top level: a scope per socket, listener, dialer, pipe
            if ffi.string(lib.nng_stat_name(item)) in _ENDPOINT_SCOPES:
                owner = lib.nng_stat_find(item, b"socket")
                if owner != ffi.NULL and lib.nng_stat_value(owner) in socket_ids:
                    return True
            item = lib.nng_stat_next(item)
        return False
    finally:
        lib.nng_stats_free(root[0])
