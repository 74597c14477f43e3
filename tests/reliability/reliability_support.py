"""Services, metrics, processes and run dirs for the reliability tests (no load generation here)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from minisgl_core.testing.service import (
    RunningService,
    launch_service,
    parse_metrics,
    wait_for_metrics,
)

API_KEY = "reliability-key-7f3a9c"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
# small context: fuzzed requests stay cheap (max_tokens >= 256 is a 400) and over-context is easy
CONTEXT = 256
BASE_ARGS = ["--max-seq-len-override", str(CONTEXT), "--num-pages", "256", "--page-size", "16",
             "-s", "num_threads=1"]


# `make soak` sets MINISGL_SOAK_REQUESTS; the slow scenarios run only then
SOAK_MODE = bool(os.environ.get("MINISGL_SOAK_REQUESTS"))
SOAK_MARKS = (pytest.mark.slow, pytest.mark.skipif(
    not SOAK_MODE, reason="runs with `make soak` (MINISGL_SOAK_REQUESTS set)"))


@dataclass(frozen=True)
class LaunchSpec:
    """How one pooled service is started."""

    transport: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    metrics_need_key: bool = False
    frontend: str = "openai"


# zmq gets its key from the environment, nng from the flag, and nng also locks /metrics
POOLED = {
    "zmq": LaunchSpec("zmq", tuple(BASE_ARGS), {"MINISGL_API_KEY": API_KEY}),
    "nng": LaunchSpec("nng", (*BASE_ARGS, "--api-key", API_KEY,
                              "-s", "frontends.openai.metrics_require_key=true"),
                      metrics_need_key=True),
}


@dataclass
class Service:
    """A launched service together with what a client needs to reach it."""

    run: RunningService
    spec: LaunchSpec
    run_dir: Path
    model: str
    model_dir: Path

    @property
    def url(self) -> str:
        return self.run.url

    @property
    def pid(self) -> int:
        return self.run.proc.pid

    def metrics(self) -> dict[str, float]:
        """/metrics parsed into {sample with labels: value}."""
        return parse_metrics(httpx.get(f"{self.url}/metrics", headers=AUTH, timeout=10).text)

    def wait_metrics(self, predicate: Callable[[dict[str, float]], bool],
                     timeout: float = 60.0, what: str | None = None) -> dict[str, float]:
        """Poll /metrics until ``predicate`` holds; fail after ``timeout`` saying so."""
        return wait_for_metrics(self.metrics, predicate, timeout, what)

    def workers(self) -> dict[str, psutil.Process]:
        """role -> worker process (tokenizer, detokenizer, scheduler)."""
        return self.run.workers()

    def alive(self) -> bool:
        """The launcher and its three workers are running."""
        return self.run.proc.poll() is None and len(self.workers()) == 3 and all(
            p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            for p in self.workers().values())

    def rss(self) -> dict[str, int]:
        """Resident memory in bytes of the launcher and of each worker."""
        out = {"launcher": psutil.Process(self.pid).memory_info().rss}
        for role, proc in self.workers().items():
            out[role] = proc.memory_info().rss
        return out

    def post(self, path: str, body: object, timeout: float = 60) -> httpx.Response:
        """POST JSON with the key; NaN and infinities are written as JSON5-style literals."""
        data = json.dumps(body, allow_nan=True).encode()
        return httpx.post(f"{self.url}{path}", content=data, timeout=timeout,
                          headers={**AUTH, "content-type": "application/json"})

    def log(self) -> str:
        return self.run.log()

    def vocab_size(self) -> int:
        return int(json.loads((self.model_dir / "config.json").read_text())["vocab_size"])


IDLE_KEYS = ("minisgl_requests_running", "minisgl_requests_waiting",
             "minisgl_frontend_requests_inflight", "minisgl_detokenizer_requests_active")


def is_idle(m: dict[str, float]) -> bool:
    """Every KV page free and every per-request map empty."""
    return (m.get("minisgl_kv_pages_free") == m.get("minisgl_kv_pages_total")
            and all(m.get(k, 0) == 0 for k in IDLE_KEYS))


def idle_view(m: dict[str, float]) -> dict[str, float]:
    """The samples the idle invariant looks at, for assertion messages."""
    return {k: v for k, v in m.items()
            if k in IDLE_KEYS or k.startswith("minisgl_kv_pages")}


def pages_leaked(m: dict[str, float]) -> int:
    return int(m.get("minisgl_kv_pages_total", 0) - m.get("minisgl_kv_pages_free", 0))


def find_run_dir(launcher_pid: int) -> Path:
    """The private run dir, found from the ipc sockets the launcher has bound (control, ...)."""
    for conn in psutil.Process(launcher_pid).net_connections(kind="unix"):
        path = conn.laddr
        if isinstance(path, str) and path.endswith("/control"):
            return Path(path).parent
    raise AssertionError(f"launcher {launcher_pid} has no bound control socket")


def start(model: str, spec: LaunchSpec, log_dir: Path) -> Service:
    """Launch a service and wait until /health answers."""
    run = launch_service(model, transport=spec.transport, frontend=spec.frontend,
                         args=list(spec.args), log_dir=log_dir, env=spec.env)
    name = httpx.get(f"{run.url}/v1/models", headers=AUTH, timeout=10).json()["data"][0]["id"]
    return Service(run, spec, find_run_dir(run.proc.pid), name, Path(model))


def stop_and_check(svc: Service, sig: int = signal.SIGTERM) -> list[str]:
    """Stop a service; return what it left behind (processes, run dir, bad exit code)."""
    children = _descendants(svc.pid)
    code = svc.run.stop(sig)
    problems = []
    if sig == signal.SIGTERM and code != 0:
        problems.append(f"{svc.spec.transport}: exit code {code} after SIGTERM")
    left = leftovers(children)
    if left:
        problems.append(f"{svc.spec.transport}: processes left running: {left}")
    if svc.run_dir.exists():
        problems.append(f"{svc.spec.transport}: run dir left: {sorted(os.listdir(svc.run_dir))}")
    return problems


def _descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def leftovers(pids: list[int], timeout: float = 30.0) -> list[int]:
    """The pids among ``pids`` still alive (zombies excluded) after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


class ServicePool:
    """One live service per pooled transport, launched on first use."""

    def __init__(self, model: str, log_dir: Path) -> None:
        self.model = model
        self.log_dir = log_dir
        self._live: dict[str, Service] = {}

    def get(self, name: str) -> Service:
        """The pooled service for ``name`` ("zmq" or "nng"), relaunched if it died."""
        svc = self._live.get(name)
        if svc is None or not svc.alive():
            if svc is not None:
                stop_and_check(svc, signal.SIGKILL)
            svc = self._live[name] = start(self.model, POOLED[name], self.log_dir)
        return svc

    def take(self, name: str) -> Service:
        """A live service the caller owns from now on (and must stop)."""
        svc = self.get(name)
        del self._live[name]
        return svc

    def close(self) -> list[str]:
        """Stop every pooled service; the problems found while stopping them."""
        problems: list[str] = []
        for svc in self._live.values():
            problems += stop_and_check(svc)
        self._live.clear()
        return problems
