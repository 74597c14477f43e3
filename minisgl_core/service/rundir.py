"""Private per-run directories (mode 0700) and the ipc endpoints that live in them."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import tempfile
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
