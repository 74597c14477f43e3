"""A free TCP port, for what must listen on a port known in advance (a process group's store)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on right now (another process may still take it
    before the caller binds it: callers fail clearly if so)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
