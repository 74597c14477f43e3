"""TCP endpoints for transports: the options that choose them, the rule that a socket leaving the
host needs keys, the key files ``minisgl keys new`` writes, and the log of refused peers.

A transport that offers tcp uses ``NetworkOptions`` as its options table and may give its factory
a ``write_keys(directory: Path) -> list[Path]`` callable: ``minisgl keys new DIR`` calls it with
``DIR/<transport name>`` (a fresh 0700 directory) and the transport reads the same directory
back when ``keys = "DIR"`` is set. Every process of one service uses the same key directory.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minisgl_core.plugin.transport_util import TransportOptions

if TYPE_CHECKING:
    from minisgl_core.plugin.registry import Registries

log = logging.getLogger("minisgl.transport")

TCP_SCHEMES = ("tcp", "tls+tcp")
ENDPOINT_KINDS = ("ipc", "tcp")
MAX_PORT = 65535


def keys_hint(transport: str) -> str:
    """How to make keys, in the words every key-related error ends with."""
    return f"make them with `minisgl keys new DIR` and set transports.{transport}.keys=DIR"


@dataclass(frozen=True)
class PortRange:
    """The ports tcp endpoints may use: ``first``..``last`` inclusive, or any free one (0)."""

    first: int = 0
    last: int = 0

    @property
    def any(self) -> bool:
        return self.first == 0

    @classmethod
    def parse(cls, value: Any) -> PortRange:
        """``0`` (any free port), ``5600`` or ``"5600-5699"``; ValueError otherwise."""
        if isinstance(value, PortRange):
            return value
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"expected a port, a range such as \"5600-5699\" or 0, got {value!r}")
        text = str(value).strip()
        first_text, dash, last_text = text.partition("-")
        try:
            first = int(first_text)
            last = int(last_text) if dash else first
        except ValueError:
            raise ValueError(f"expected a port, a range such as \"5600-5699\" or 0, "
                             f"got {value!r}") from None
        if first == 0 and not dash:
            return cls()
        if not (1 <= first <= MAX_PORT and 1 <= last <= MAX_PORT):
            raise ValueError(f"ports must lie in 1-{MAX_PORT} (or be 0 for any), got {value!r}")
        if last < first:
            raise ValueError(f"port range {value!r} ends before it starts")
        return cls(first, last)

    def __str__(self) -> str:
        if self.any:
            return "0"
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def parse_host(value: Any) -> str:
    """A bind address: an IPv4 or IPv6 literal (``127.0.0.1``, ``0.0.0.0``, ``::1``)."""
    if not isinstance(value, str):
        raise ValueError(f"expected an IP address to bind, got {value!r}")
    try:
        return str(ipaddress.ip_address(value.strip().strip("[]")))
    except ValueError:
        raise ValueError(f"expected an IP address to bind (127.0.0.1, 0.0.0.0, ::1...), "
                         f"got {value!r}") from None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for any other name or address
    (wildcards such as 0.0.0.0 included: they listen on every interface)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_tcp(endpoint: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of ``tcp://h:p`` or ``tls+tcp://h:p`` (``*`` means 0); else None."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme not in TCP_SCHEMES:
        return None
    host, _, port = rest.rpartition(":")
    try:
        number = 0 if port == "*" else int(port)
    except ValueError:
        raise ValueError(f"bad tcp endpoint {endpoint!r}: the port is not a number") from None
    return scheme, host.strip("[]"), number


def check_tcp_endpoint(transport: str, endpoint: str, has_keys: bool) -> None:
    """Raise ValueError (one line) when ``endpoint`` is tcp off this host and there are no keys."""
    parts = split_tcp(endpoint)
    if parts is not None and not has_keys and not is_loopback(parts[1]):
        raise ValueError(f"transport {transport!r}: {endpoint} is reachable from other hosts and "
                         f"has no keys; {keys_hint(transport)}")


_said_plaintext: set[tuple[str, str]] = set()


def note_plaintext(transport: str, host: str) -> None:
    """Log, once per process, that loopback tcp runs without authentication or encryption."""
    if (transport, host) not in _said_plaintext:
        _said_plaintext.add((transport, host))
        log.info("transport %s: tcp on %s without keys: peers are not authenticated and "
                 "traffic is not encrypted (allowed on loopback only)", transport, host)


@dataclass(frozen=True)
class NetworkOptions(TransportOptions):
    """``TransportOptions`` plus the keys of transports that offer tcp endpoints.

    ``endpoints`` is "ipc" (the default: files in the private run directory) or "tcp";
    ``host`` the address tcp endpoints bind; ``ports`` where their ports come from; ``keys``
    the directory ``minisgl keys new`` wrote (required when ``host`` is not loopback);
    ``handshake_ms`` how long a connection may take to authenticate before it is closed.
    """

    endpoints: str = "ipc"
    host: str = "127.0.0.1"
    ports: PortRange = field(default_factory=PortRange)
    keys: str = ""
    handshake_ms: int = 10_000

    @property
    def tcp(self) -> bool:
        return self.endpoints == "tcp"

    @classmethod
    def _check_value(cls, transport: str, key: str, value: Any) -> Any:
        try:
            if key == "endpoints":
                if value not in ENDPOINT_KINDS:
                    raise ValueError(f"expected one of {', '.join(ENDPOINT_KINDS)}, got {value!r}")
                return value
            if key == "host":
                return parse_host(value)
            if key == "ports":
                return PortRange.parse(value)
            if key == "keys":
                if not isinstance(value, str | os.PathLike):
                    raise ValueError(f"expected a directory, got {value!r}")
                return os.path.abspath(os.path.expanduser(os.fspath(value))) if value else ""
        except ValueError as exc:
            raise ValueError(f"option {key!r} of transport {transport!r}: {exc}") from None
        return super()._check_value(transport, key, value)

    def _check_table(self, transport: str) -> None:
        if self.tcp and not self.keys and not is_loopback(self.host):
            raise ValueError(f"transport {transport!r}: tcp endpoints on {self.host} are "
                             f"reachable from other hosts and need keys; {keys_hint(transport)}")

    def key_dir(self, transport: str) -> Path | None:
        """``<keys>/<transport>`` (None without keys); ValueError if it was never written."""
        if not self.keys:
            return None
        path = Path(self.keys) / transport
        if not path.is_dir():
            raise ValueError(f"transport {transport!r}: {path} does not exist; "
                             f"{keys_hint(transport)}")
        return path


# ---- key files ----------------------------------------------------------------------------------


def write_private(path: Path, data: bytes) -> Path:
    """Create ``path`` with mode 0600 (never replacing a file) holding ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def read_private(path: Path, transport: str) -> bytes:
    """The bytes of a key file; ValueError if it is missing or others may read it."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        raise ValueError(f"transport {transport!r}: {path} is missing; "
                         f"{keys_hint(transport)}") from None
    if mode & 0o077:
        raise ValueError(f"transport {transport!r}: {path} may be read by others (mode "
                         f"{mode:o}); run chmod 600 {path}")
    return path.read_bytes()


def write_all_keys(regs: Registries, directory: Path, names: list[str] | None = None,
                   force: bool = False) -> dict[str, list[Path]]:
    """Write the keys of every transport that has ``write_keys`` (or of ``names``) under
    ``directory``, one 0700 subdirectory each; FileExistsError unless ``force`` replaces them."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    chosen = list(names) if names else regs.transports.names()
    written: dict[str, list[Path]] = {}
    for name in chosen:
        writer = getattr(regs.transports.get(name), "write_keys", None)
        if writer is None:
            if names:
                raise ValueError(f"transport {name!r} has no keys to write (it offers no tcp)")
            continue
        target = directory / name
        if target.exists():
            if not force:
                raise FileExistsError(f"{target} already holds keys; --force replaces them "
                                      f"(every process of the service then needs the new ones)")
            shutil.rmtree(target)
        target.mkdir(mode=0o700)
        try:
            written[name] = list(writer(target))
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
    return written


# ---- refused peers ------------------------------------------------------------------------------


class RefusalLog:
    """Warnings about refused peers: up to ``burst`` per (endpoint, reason) every ``every``
    seconds, the rest counted into the next line, so that a misconfigured peer reconnecting
    every few milliseconds cannot flood the log."""

    def __init__(self, transport: str, every: float = 10.0, burst: int = 5) -> None:
        self.transport = transport
        self.every = every
        self.burst = burst
        self._lock = threading.Lock()
        # (endpoint, reason) -> (window start, lines in this window, held back)
        self._seen: dict[tuple[str, str], tuple[float, int, int]] = {}

    def refused(self, endpoint: str, reason: str, peer: str | None = None) -> None:
        """A peer connecting to our ``endpoint`` was refused (and its bytes dropped)."""
        who = f"a peer at {peer}" if peer else "a peer"
        self._warn(endpoint, reason, f"refused {who} on {endpoint}: {reason}")

    def failed(self, endpoint: str, reason: str) -> None:
        """Our connection to ``endpoint`` failed its handshake (the other side refused us)."""
        self._warn(endpoint, reason, f"handshake with {endpoint} failed: {reason}")

    def _warn(self, endpoint: str, reason: str, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            start, lines, held = self._seen.get((endpoint, reason), (now, 0, 0))
            if now - start >= self.every:
                start, lines = now, 0
            if lines >= self.burst:
                self._seen[(endpoint, reason)] = (start, lines, held + 1)
                return
            self._seen[(endpoint, reason)] = (start, lines + 1, 0)
        more = f" (and {held} more like it since the last report)" if held else ""
        log.warning("transport %s: %s%s", self.transport, text, more)
