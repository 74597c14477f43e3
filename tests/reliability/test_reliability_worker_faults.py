"""Faults under load: a worker killed with SIGKILL, SIGTERM to the launcher, an overloaded
waiting queue. Every in-flight request ends (answered or failed) within a deadline, the launcher
exits with a code and a message that fit, and nothing it started is left running.

This file consumes the pooled services (its name sorts last on purpose).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest
from reliability_fuzz import check_error_envelope
from reliability_inflight import load_then
from reliability_support import (
    API_KEY,
    AUTH,
    BASE_ARGS,
    SOAK_MARKS,
    LaunchSpec,
    Service,
    ServicePool,
    idle_view,
    is_idle,
    leftovers,
    start,
)

EXIT_DEADLINE_S = 10.0
MAX_RUNNING, MAX_WAITING = 4, 8
OVERLOAD = LaunchSpec("zmq", (*BASE_ARGS, "-s", f"max_running_requests={MAX_RUNNING}",
                              "-s", f"max_waiting_requests={MAX_WAITING}"),
                      {"MINISGL_API_KEY": API_KEY})


def _wait_exit(svc: Service, timeout: float) -> int | None:
    try:
        return svc.run.proc.wait(timeout)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: reported by the caller
        return None


def _assert_nothing_left(svc: Service, children: list[int]) -> None:
    assert not leftovers(children), f"left running: {leftovers(children)}"
    assert not svc.run_dir.exists(), f"run dir left: {os.listdir(svc.run_dir)}"


@pytest.mark.parametrize("role, transport", [
    ("tokenizer", "zmq"),
    ("detokenizer", "nng"),
    # the default run has the mid-stream case in tests/service; under load with `make soak`
    pytest.param("scheduler", "zmq", marks=SOAK_MARKS),
])
def test_worker_killed_under_load(pool: ServicePool, role: str, transport: str) -> None:
    svc = pool.take(transport)
    children = [p.pid for p in psutil.Process(svc.pid).children(recursive=True)]
    victim = svc.workers()[role]

    def kill() -> None:
        victim.send_signal(signal.SIGKILL)

    try:
        endings = load_then(svc, kill, count=12)
        code = _wait_exit(svc, EXIT_DEADLINE_S)
        assert code is not None, f"launcher still running {EXIT_DEADLINE_S:.0f} s after the kill"
        assert code != 0
        assert f"minisgl::{role}" in svc.log(), svc.log()[-2000:]
        assert endings["completed"] < 12, f"the kill came after the load: {endings}"
        _assert_nothing_left(svc, children)
    finally:
        svc.run.stop(signal.SIGKILL)
    print(f"kill {role} ({transport}): {dict(endings)}")


@pytest.fixture(scope="module")
def overloaded(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = start(tiny_model, OVERLOAD, tmp_path_factory.mktemp("overload"))
    try:
        yield svc
    finally:
        svc.run.stop(signal.SIGKILL)


async def _burst(svc: Service, count: int) -> list[httpx.Response]:
    body = {"model": svc.model, "prompt": "burst", "max_tokens": 60, "ignore_eos": True}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=count)) as c:
        return list(await asyncio.gather(*(
            c.post(f"{svc.url}/v1/completions", json=body, headers=AUTH) for _ in range(count))))


def test_waiting_queue_over_its_limit_gives_429(overloaded: Service) -> None:
    svc = overloaded
    peak = {"waiting": 0.0}
    stop = False

    def watch() -> None:
        while not stop:
            m = svc.metrics()
            peak["waiting"] = max(peak["waiting"], m.get("minisgl_requests_waiting", 0))
            time.sleep(0.02)

    async def main() -> list[httpx.Response]:
        watcher = asyncio.create_task(asyncio.to_thread(watch))
        try:
            return await _burst(svc, 32)
        finally:
            nonlocal stop
            stop = True
            await watcher

    answers = asyncio.run(main())
    statuses = sorted(r.status_code for r in answers)
    assert set(statuses) <= {200, 429}, statuses
    rejected = [r for r in answers if r.status_code == 429]
    assert rejected, f"32 at once, {MAX_RUNNING} running + {MAX_WAITING} waiting allowed: " \
        f"none refused (peak waiting {peak['waiting']:.0f})"
    assert check_error_envelope(rejected[0]) is None
    assert "waiting queue is full" in rejected[0].json()["error"]["message"]
    assert peak["waiting"] <= MAX_WAITING, f"waiting queue grew to {peak['waiting']:.0f}"
    m = svc.wait_metrics(is_idle, 10)
    assert is_idle(m), idle_view(m)
    again = svc.post("/v1/completions", {"prompt": "after", "max_tokens": 2})
    assert again.status_code == 200, again.text


def test_sigterm_under_load_answers_or_fails_everyone(overloaded: Service) -> None:
    svc = overloaded
    children = [p.pid for p in psutil.Process(svc.pid).children(recursive=True)]

    def terminate() -> None:
        svc.run.proc.send_signal(signal.SIGTERM)

    endings = load_then(svc, terminate, count=MAX_WAITING)  # 4 running, 4 waiting
    code = _wait_exit(svc, EXIT_DEADLINE_S)
    assert code == 0, f"exit code {code} after SIGTERM\n{svc.log()[-2000:]}"
    _assert_nothing_left(svc, children)
    print(f"SIGTERM under load: {dict(endings)}")
