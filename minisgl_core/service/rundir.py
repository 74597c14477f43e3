"""Private per-run directories (mode 0700), the ipc endpoints that live in them, and tcp
endpoints whose ports the processes of a run agree on through them."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from minisgl_core.interfaces import AddressInUse

# sockaddr_un.sun_path is 108 bytes on Linux, one for the terminating NUL (zmq.IPC_PATH_MAX_LEN).
IPC_PATH_MAX = 107
_CHANNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def make_run_dir(prefix: str = "minisgl-", base: str | os.PathLike[str] | None = None) -> Path:
    """Create a fresh directory only the current user can enter (0700) and return its path.

    ``base`` defaults to the system temp dir; keep it short, ipc paths are limited to 107 bytes.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))  # mkdtemp already uses 0700
    os.chmod(path, 0o700)
    check_private(path)
    return path


def check_private(path: str | os.PathLike[str]) -> None:
    """Raise PermissionError unless ``path`` is a directory owned by us with no group/other bits."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"run dir {path} is not a directory")
    if st.st_uid != os.getuid():
        raise PermissionError(f"run dir {path} is owned by uid {st.st_uid}, not {os.getuid()}")
    if st.st_mode & 0o077:
        raise PermissionError(f"run dir {path} has mode {st.st_mode & 0o777:o}, expected 700")


@contextlib.contextmanager
def private_run_dir(prefix: str = "minisgl-",
                    base: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """``with private_run_dir() as d:`` a 0700 directory, removed with its contents on exit."""
    path = make_run_dir(prefix, base)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def check_channel(channel: str) -> str:
    """Return ``channel`` if it is a safe file name ("scheduler", "frontend.x-1"), else raise."""
    if not _CHANNEL.fullmatch(channel):
        raise ValueError(f"bad channel name {channel!r}: use letters, digits, '.', '_' and '-'")
    return channel


def ipc_endpoint(run_dir: str | os.PathLike[str], channel: str) -> str:
    """``ipc://<run_dir>/<channel>``; ValueError if the path exceeds the kernel's 107 bytes."""
    path = os.path.join(os.fspath(run_dir), check_channel(channel))
    if not os.path.isabs(path):
        path = os.path.abspath(path)
    if len(path.encode()) > IPC_PATH_MAX:
        raise ValueError(f"ipc path is {len(path.encode())} bytes, the limit is {IPC_PATH_MAX}: "
                         f"{path} (use a shorter run dir)")
    return "ipc://" + path


def ipc_path(endpoint: str) -> str | None:
    """The file system path of an ``ipc://`` endpoint; None for other schemes and abstract ones."""
    if not endpoint.startswith("ipc://"):
        return None
    path = endpoint[len("ipc://"):]
    return None if path.startswith("@") else path


def ipc_path_is_live(path: str) -> bool:
    """True when something accepts connections on the unix socket at ``path``.

    A stale file (its binder died) or a non-socket refuses the connection and counts as free.
    """
    if not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        # ENOTSOCK / EPROTOTYPE: a regular file or a datagram socket; EAGAIN: a live but busy
        # listener (full backlog), which is in use.
        return exc.errno in (errno.EAGAIN, errno.ETIMEDOUT)
    except TimeoutError:
        return True
    else:
        return True
    finally:
        probe.close()


def claim_ipc_path(endpoint: str) -> None:
    """Raise AddressInUse when ``endpoint`` is an ipc path that a live socket already listens on.

    For libraries whose bind silently replaces a live ipc path (zmq) instead of failing.
    """
    path = ipc_path(endpoint)
    if path is not None and ipc_path_is_live(path):
        raise AddressInUse(errno.EADDRINUSE, f"{endpoint} is already bound by a live socket")


# ---- tcp endpoints ------------------------------------------------------------------------------

_handed_out: set[tuple[str, int]] = set()  # (host, port) this process already gave a channel
_handed_out_lock = threading.Lock()


def pick_port(host: str, first: int = 0, last: int = 0) -> int:
    """A port of ``host`` that nothing listens on now and this process has not handed out:
    any free one when ``first`` is 0, else the lowest free one in ``first``..``last``.

    Another process may still take it before the caller binds: that bind then fails with
    AddressInUse, which names the endpoint.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    candidates = [0] * 64 if first == 0 else list(range(first, last + 1))
    for wanted in candidates:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # as zmq and nng listeners do, so a port in TIME_WAIT counts as free
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, wanted))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise ValueError(f"cannot bind {host}: no interface has that address") from None
                continue
            port = int(probe.getsockname()[1])
        with _handed_out_lock:
            if (host, port) not in _handed_out:
                _handed_out.add((host, port))
                return port
    where = "" if first == 0 else f" in {first}-{last}"
    raise AddressInUse(errno.EADDRINUSE, f"no free tcp port{where} on {host}")


def tcp_endpoint(run_dir: str | os.PathLike[str], channel: str, *, host: str,
                 first_port: int = 0, last_port: int = 0, scheme: str = "tcp") -> str:
    """``scheme://host:port`` for ``channel``: the port is chosen once (``pick_port``) and kept
    in ``<run_dir>/<channel>.port``, so every process of the run that asks gets the same one."""
    final = Path(run_dir) / f"{check_channel(channel)}.port"
    if not final.exists():
        tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(str(pick_port(host, first_port, last_port)))
        try:
            os.link(tmp, final)  # atomic: exactly one process creates the file
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    port = int(final.read_text())
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
