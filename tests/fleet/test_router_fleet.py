"""Two minisgl services behind the real sgl-model-gateway (``sglang-router``, the ``router``
extra): round robin reaches both, answers equal direct ones, power_of_two polls /get_load, and a
service killed with SIGKILL is routed around with no request lost that its client did not see
fail (docs/scale-out.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from minisgl_core.testing.service import RunningService, free_port, launch_service

pytestmark = [
    pytest.mark.router,
    pytest.mark.skipif(importlib.util.find_spec("sglang_router") is None,
                       reason="sglang-router is not installed (pip install -e '.[router]')"),
]

SYNTHETIC = ["--scheduler", "synthetic", "--num-pages", "256", "--page-size", "16",
             "--max-seq-len-override", "512"]
MODEL = ["default"]  # the served name, set once the services run
FINISHED = ('minisgl_requests_finished_total{reason="stop"}',
            'minisgl_requests_finished_total{reason="length"}')


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` (bounded); fail saying what was awaited."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.1)


def served(svc: RunningService) -> float:
    """Engine requests this service finished normally (its own counter)."""
    m = svc.metrics()
    return sum(m.get(k, 0.0) for k in FINISHED)


class Router:
    """``python -m sglang_router.launch_router`` on a free port, stopped by its own handle."""

    def __init__(self, workers: list[str], policy: str, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"router-{policy}-{self.port}.log"
        cmd = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *workers,
               "--policy", policy, "--host", "127.0.0.1", "--port", str(self.port),
               "--prometheus-port", str(free_port()),  # not 29000, which another may hold
               "--health-check-interval-secs", "1"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        wait_until(self._ready, 120, f"the router on {self.url} answering /v1/models")

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log_path.read_text(errors="replace")[-3000:]
        try:
            return httpx.get(self.url + "/v1/models", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RunningService]]:
    from minisgl_core.testing.tiny import make_tiny_model

    tmp = tmp_path_factory.mktemp("fleet")
    model = str(make_tiny_model(tmp / "tiny", "llama"))
    started: list[RunningService] = []
    try:
        for _ in range(2):
            started.append(launch_service(model, log_dir=tmp, args=SYNTHETIC))
        MODEL[0] = started[0].model_name()
        yield started
    finally:
        for svc in started:
            svc.stop()
            with_group_gone(svc)


def with_group_gone(svc: RunningService) -> None:
    """A launcher killed with SIGKILL leaves its workers to notice; end them with it."""
    try:
        os.killpg(svc.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def chat(base: str, text: str, *, stream: bool = False) -> tuple[int, str]:
    """(status, reply text) of one chat completion; a stream's deltas joined."""
    body = {"model": MODEL[0], "messages": [{"role": "user", "content": text}],
            "max_tokens": 6, "temperature": 0, "stream": stream}
    if not stream:
        r = httpx.post(base + "/v1/chat/completions", json=body, timeout=60)
        return r.status_code, r.json()["choices"][0]["message"]["content"] if r.is_success else ""
    parts = []
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as r:
        if not r.is_success:
            return r.status_code, ""
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                assert "error" not in event, event
                parts += [c["delta"].get("content") or "" for c in event["choices"]]
    return r.status_code, "".join(parts)


def test_each_service_reports_what_routers_read(services: list[RunningService]) -> None:
    svc = services[0]
    m = svc.metrics()  # the synthetic scheduler's own page accounting, through the service
    assert m['vllm:cache_config_info{block_size="16",num_gpu_blocks="256"}'] == 1
    assert m["vllm:num_requests_running"] == m["minisgl_requests_running"]
    info = httpx.get(svc.url + "/server_info", timeout=30).json()
    assert info["model_id"] == MODEL[0] and info["max_total_tokens"] == 256 * 16
    load = httpx.get(svc.url + "/get_load", timeout=30).json()
    assert [entry["dp_rank"] for entry in load] == [0]


def test_round_robin_reaches_both_and_answers_like_direct(services: list[RunningService],
                                                           tmp_path: Path) -> None:
    direct = {(t, s): chat(services[0].url, t, stream=s)
              for t in ("fleet one", "fleet two three") for s in (False, True)}
    assert all(status == 200 and text for status, text in direct.values())
    before = [served(s) for s in services]
    router = Router([s.url for s in services], "round_robin", tmp_path)
    try:
        # the router may health-check before it routes: judge only what it served
        for (text, stream), expected in direct.items():
            for _ in range(2):
                assert chat(router.url, text, stream=stream) == expected
        gained = [served(s) - b for s, b in zip(services, before, strict=True)]
        assert sum(gained) == 8 and min(gained) >= 1, gained
    finally:
        router.stop()


def test_power_of_two_reads_get_load(services: list[RunningService], tmp_path: Path) -> None:
    polls = "minisgl_get_load_requests_total"
    before = [s.metrics()[polls] for s in services]
    router = Router([s.url for s in services], "power_of_two", tmp_path)
    try:
        for i in range(4):
            assert chat(router.url, f"load {i}")[0] == 200
        wait_until(lambda: all(s.metrics()[polls] > b for s, b in zip(services, before,
                                                                      strict=True)),
                   120, "the router to GET /get_load of both services")
    finally:
        router.stop()


def test_a_killed_service_is_routed_around(services: list[RunningService],
                                           tmp_path: Path) -> None:
    dead, alive = services
    router = Router([s.url for s in services], "round_robin", tmp_path)
    try:
        dead.proc.kill()  # kill -9 of the launcher
        dead.proc.wait(30)
        with_group_gone(dead)
        start = served(alive)
        ok = 0
        streak = 0
        deadline = time.monotonic() + 120
        # every request either answers in full or fails visibly; none hangs (httpx timeout)
        while streak < 10:
            assert time.monotonic() < deadline, "the router kept sending to the dead service"
            status, text = chat(router.url, "after the kill")
            if status == 200:
                assert text
                ok, streak = ok + 1, streak + 1
            else:
                assert status >= 500, status
                streak = 0
        # each answer the client saw was served by the survivor: nothing lost, nothing doubled
        assert served(alive) - start == ok
    finally:
        router.stop()
