"""A free TCP port, for what must listen on a port known in advance (a process group's store)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000  # below this, ports of well-known services


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on right now (another process may still take it
    before the caller binds it: callers fail clearly if so).

    Where the kernel says which ports it hands to outgoing connections, the port is picked below
    that range: a port from the range (what binding port 0 returns) can be taken in the meantime
    by any connection a busy host opens, while one below it can only be taken by another bind."""
    low = _ephemeral_low()
    for _ in range(50 if low > _LOWEST else 0):
        port = random.randrange(_LOWEST, low)
        if _bindable(host, port):
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
