"""Run a real `minisgl launch` in a subprocess on a free 127.0.0.1 port (tests, benchmarks)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from minisgl_core.service.ports import free_port

if TYPE_CHECKING:
    import psutil


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text parsed into {sample name with labels: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


GAUGES_SHOWN = ("minisgl_requests_running", "minisgl_requests_waiting",
                "minisgl_kv_pages_total", "minisgl_kv_pages_free",
                "minisgl_frontend_requests_inflight")


def wait_for_metrics(read: Callable[[], dict[str, float]],
                     predicate: Callable[[dict[str, float]], bool], timeout: float,
                     what: str | None = None) -> dict[str, float]:
    """Call ``read`` until ``predicate`` holds on what it returns (that is returned); after
    ``timeout`` seconds raise AssertionError naming ``what`` and the last load gauges.

    Waits in tests end on a condition, never on a sleep, and their timeouts are generous (a
    host several times slower than the one they were written on still passes).
    """
    deadline = time.monotonic() + timeout
    while True:
        m = read()
        if predicate(m):
            return m
        if time.monotonic() > deadline:
            shown = {k: v for k, v in m.items()
                     if k in GAUGES_SHOWN or k.startswith("minisgl_requests_finished_total")}
            raise AssertionError(f"waited {timeout:.0f} s for {what or 'a metrics condition'}; "
                                 f"last: {shown}")
        time.sleep(0.05)


@dataclass
class RunningService:
    """A launched service: its process handle, URL and captured log."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    worker_pids: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def model_name(self) -> str:
        """The id /v1/models lists."""
        return str(httpx.get(f"{self.url}/v1/models", timeout=30).json()["data"][0]["id"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        """/metrics parsed into {sample name with labels: value}."""
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=30).text)

    def wait_metrics(self, predicate: Callable[[dict[str, float]], bool],
                     timeout: float = 60.0, what: str | None = None) -> dict[str, float]:
        """Poll /metrics until ``predicate(metrics)`` holds and return those metrics; past
        ``timeout`` fail, saying what was awaited and what the gauges last showed."""
        return wait_for_metrics(self.metrics, predicate, timeout, what)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal the launcher, wait for it, and make sure nothing it started is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        return self.proc.returncode

    def assert_ended_after_death(self, worker: str, timeout: float = 60.0) -> None:
        """Assert the launcher exits non-zero on its own once ``worker`` has died, names it in
        its log, and leaves no worker behind."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the launcher was still running {timeout:.0f} s after "
                                 f"{worker} died") from None
        assert self.proc.returncode != 0
        assert worker in self.log()
        assert not self.leftover_workers()

    def workers(self) -> dict[str, psutil.Process]:
        """role -> worker process (tokenizer, detokenizer, scheduler), as titled minisgl::<role>."""
        import psutil

        out = {}
        for pid in self.worker_pids:
            try:
                title = psutil.Process(pid).cmdline()[0]
            except (psutil.Error, IndexError):
                continue
            out[title.removeprefix("minisgl::").strip()] = psutil.Process(pid)
        return out

    @contextmanager
    def paused(self, role: str) -> Iterator[psutil.Process]:
        """Freeze one worker with SIGSTOP for the block (SIGCONT after, if it still lives);
        "scheduler" under ``--dp N`` freezes every replica (and yields the first).

        Messages sent to a frozen worker wait in its sockets, so a test can line requests up
        at it whatever the speed of the engine or of the client.
        """
        import psutil

        procs = self.replicas(role)
        for proc in procs:
            proc.suspend()
        try:
            yield procs[0]
        finally:
            for proc in procs:
                with suppress(psutil.Error):  # killed inside the block: nothing to resume
                    proc.resume()

    def replicas(self, role: str) -> list[psutil.Process]:
        """The worker of ``role``, or its replicas under ``--dp N`` (``scheduler-dp0`` ...)."""
        workers = self.workers()
        if role in workers:
            return [workers[role]]
        found = [p for name, p in sorted(workers.items()) if name.startswith(f"{role}-dp")]
        if not found:
            raise KeyError(role)
        return found

    def leftover_workers(self, timeout: float = 30.0) -> list[int]:
        """Worker pids still alive after the launcher ended (should be none)."""
        import psutil

        deadline = time.monotonic() + timeout
        while True:
            alive = [p for p in self.worker_pids if psutil.pid_exists(p)
                     and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)


def launch_service(model: str, *, transport: str | None = "zmq", frontend: str | None = "openai",
                   args: Sequence[str] = (), log_dir: Path, timeout: float = 180.0,
                   env: dict[str, str] | None = None) -> RunningService:
    """Start `minisgl launch` and wait until /health answers 200 (or fail with its log);
    ``transport`` / ``frontend`` None: not named, the plugins' defaults."""
    port = free_port()
    log_path = log_dir / f"launch-{transport or 'default'}-{port}.log"
    named = [*(["--transport", transport] if transport else []),
             *(["--frontend", frontend] if frontend else [])]
    cmd = [sys.executable, "-m", "minisgl_core", "launch", *named, "--model", model,
           "--port", str(port), *args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    service = RunningService(proc, port, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"launch exited with {proc.returncode}:\n{service.log()[-3000:]}")
        try:
            if httpx.get(f"{service.url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            service.stop(signal.SIGKILL)
            raise RuntimeError(f"not ready after {timeout:.0f} s:\n{service.log()[-3000:]}")
        time.sleep(0.2)
    service.worker_pids = worker_pids(proc.pid)
    return service


def worker_pids(launcher_pid: int) -> list[int]:
    """Pids of the launcher's minisgl::<role> worker processes."""
    import psutil

    out = []
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if re.search(r"minisgl::\w+", " ".join(child.cmdline())):
                out.append(child.pid)
        except psutil.Error:
            continue
    return out


__all__ = ["RunningService", "free_port", "launch_service", "parse_metrics", "worker_pids"]
