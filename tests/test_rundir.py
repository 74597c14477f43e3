"""Private run directories and ipc endpoints: mode 0700, path limits, live-socket detection."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from minisgl_core.interfaces import AddressInUse
from minisgl_core.service.rundir import (
    IPC_PATH_MAX,
    check_private,
    claim_ipc_path,
    ipc_endpoint,
    ipc_path,
    ipc_path_is_live,
    make_run_dir,
    private_run_dir,
)


def test_run_dir_is_private_and_removed() -> None:
    with private_run_dir() as path:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        (path / "f").write_text("x")
    assert not path.exists()


def test_check_private_refuses_open_directories(tmp_path: Path) -> None:
    path = make_run_dir(base=tmp_path)
    check_private(path)
    os.chmod(path, 0o755)
    with pytest.raises(PermissionError, match="expected 700"):
        check_private(path)


def test_ipc_endpoint_shape_and_limits(tmp_path: Path) -> None:
    with private_run_dir() as path:
        ep = ipc_endpoint(path, "frontend.openai-7")
        assert ep == f"ipc://{path}/frontend.openai-7"
        assert ipc_path(ep) == f"{path}/frontend.openai-7"
    deep = tmp_path / ("d" * (IPC_PATH_MAX - len(str(tmp_path))))
    with pytest.raises(ValueError, match="the limit is 107"):
        ipc_endpoint(deep, "scheduler")
    for bad in ("", "a/b", "../x", ".hidden", "sp ace"):
        with pytest.raises(ValueError, match="bad channel name"):
            ipc_endpoint(tmp_path, bad)
    assert ipc_path("tcp://127.0.0.1:5") is None and ipc_path("ipc://@abstract") is None


def test_live_socket_detection() -> None:
    with private_run_dir() as path:
        sock_path = str(path / "s")
        assert not ipc_path_is_live(sock_path)  # nothing there
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock_path)
        assert not ipc_path_is_live(sock_path)  # bound but not listening: refuses
        listener.listen(1)
        assert ipc_path_is_live(sock_path)
        with pytest.raises(AddressInUse, match="already bound by a live socket"):
            claim_ipc_path("ipc://" + sock_path)
        listener.close()
        assert not ipc_path_is_live(sock_path)  # a stale file left by a dead binder is free
        claim_ipc_path("ipc://" + sock_path)
        (path / "plain").write_text("not a socket")
        assert not ipc_path_is_live(str(path / "plain"))
