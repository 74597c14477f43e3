"""A service whose scheduler joins from "another host": `minisgl worker` in a process group of
its own, over tcp endpoints with keys on 127.0.0.1 (tests and examples)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from minisgl_core.service.ports import free_port
from minisgl_core.testing.service import RunningService, worker_pids

WAIT_S = 180.0


@dataclass
class Remote:
    """A launcher waiting for a remote scheduler, and the `minisgl worker` that joined it."""

    svc: RunningService
    address: str
    worker: subprocess.Popen[bytes]
    worker_log: Path

    def log(self) -> str:
        return self.worker_log.read_text(errors="replace")


def wait_for(what: str, ok: Callable[[], bool], log: Callable[[], str],
             timeout: float = WAIT_S) -> None:
    """Poll ``ok`` until true; fail after ``timeout`` saying what it waited for, with the log."""
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}:\n{log()[-3000:]}")
        time.sleep(0.1)


def health(svc: RunningService) -> int:
    """The status of GET /health; 0 while nothing answers."""
    try:
        return httpx.get(f"{svc.url}/health", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def start_worker(address: str, keys: Path, log_path: Path, *args: str,
                 transport: str = "zmq") -> subprocess.Popen[bytes]:
    """`minisgl worker --role scheduler` in a session of its own, as if on another host."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "minisgl_core", "worker", "--role", "scheduler",
             "--transport", transport, "--connect", address, "--keys", str(keys),
             "--timeout", str(WAIT_S), *args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@contextmanager
def remote_service(model: str, keys: Path, log_dir: Path, args: Sequence[str] = (), *,
                   transport: str = "zmq") -> Iterator[Remote]:
    """`minisgl launch --remote scheduler` over tcp + ``keys``, joined by `minisgl worker`;
    both are stopped, and no worker may be left, when the block ends."""
    port = free_port()
    log_path = log_dir / f"launch-remote-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "minisgl_core", "launch", "--model", model, "--port",
             str(port), "--transport", transport, "-s", f"transports.{transport}.endpoints=tcp",
             "-s", f"transports.{transport}.keys={keys}", "--remote", "scheduler", *args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    svc = RunningService(proc, port, log_path)
    worker = None
    try:
        found: list[str] = []

        def announced() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"launch exited {proc.returncode}:\n{svc.log()}")
            found[:] = re.findall(r"--connect (\S+)", svc.log())
            return bool(found)

        wait_for("the launcher to announce its address", announced, svc.log)
        worker_log = log_dir / f"worker-{port}.log"
        worker = start_worker(found[0], keys, worker_log, transport=transport)
        wait_for("/health 200 with the remote scheduler", lambda: health(svc) == 200,
              lambda: svc.log() + worker_log.read_text())
        svc.worker_pids = [*worker_pids(proc.pid), worker.pid]  # the remote one too
        yield Remote(svc, found[0], worker, worker_log)
    finally:
        svc.stop()
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(30)
        if svc.leftover_workers():
            raise AssertionError(f"orphan workers:\n{svc.log()[-2000:]}")


