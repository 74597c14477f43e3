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

from minisgl_core.testing.service import free_port

# generous for a host 5x slower than this one: the stop itself is bounded by design at ~8 s
# (running.STOP_GRACE_S, then SIGTERM and SIGKILL a second each)
EXIT_DEADLINE_S = 60.0
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

    def all_in_flight() -> bool:
        return svc.metrics()["minisgl_frontend_requests_inflight"] == 12

    try:
        # frozen before the load, the victim holds all 12 requests in flight when the kill
        # comes, however fast the engine (200 tokens take the tiny model under a second) and
        # however slow this client
        with svc.run.paused(role) as victim:
            endings = load_then(svc, lambda: victim.send_signal(signal.SIGKILL), count=12,
                                ready=all_in_flight)
        code = _wait_exit(svc, EXIT_DEADLINE_S)
        assert code is not None, f"launcher still running {EXIT_DEADLINE_S:.0f} s after the kill"
        assert code != 0
        assert f"minisgl::{role}" in svc.log(), svc.log()[-2000:]
        assert endings["completed"] == 0, f"answers got past a frozen {role}: {endings}"
        _assert_nothing_left(svc, children)
    finally:
        svc.run.stop(signal.SIGKILL)
    print(f"kill {role} ({transport}): {dict(endings)}")


@pytest.fixture(scope="module")
def overloaded(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Small limits, and the gRPC frontend next to the OpenAI one."""
    grpc_port = free_port()
    spec = LaunchSpec(OVERLOAD.transport, (*OVERLOAD.args, "--grpc-port", str(grpc_port)),
                      OVERLOAD.env, frontend="openai,grpc")
    svc = start(tiny_model, spec, tmp_path_factory.mktemp("overload"))
    svc.grpc_port = grpc_port  # type: ignore[attr-defined]
    try:
        yield svc
    finally:
        svc.run.stop(signal.SIGKILL)


def _grpc_call(svc: Service, metadata: tuple[tuple[str, str], ...] = (
        ("authorization", f"Bearer {API_KEY}"),)) -> str:
    """One long Generate over gRPC; its status code name (OK when it completed)."""
    import grpc
    from minisgl_frontend_grpc.codegen import load_stubs

    pb2, pb2_grpc = load_stubs()
    request = pb2.GenerateRequest(prompt="burst", sampling=pb2.SamplingParams(
        max_tokens=60, ignore_eos=True))
    with grpc.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as channel:  # type: ignore[attr-defined]
        try:
            for _ in pb2_grpc.GeneratorStub(channel).Generate(request, timeout=60,
                                                               metadata=metadata):
                pass
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    return "OK"


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
    print(f"burst of 32 (HTTP): {len(rejected)} got 429, peak waiting {peak['waiting']:.0f}")
    m = svc.wait_metrics(is_idle, what="the service idle")
    assert is_idle(m), idle_view(m)
    again = svc.post("/v1/completions", {"prompt": "after", "max_tokens": 2})
    assert again.status_code == 200, again.text


def test_grpc_waiting_queue_over_its_limit_gives_resource_exhausted(overloaded: Service) -> None:
    from concurrent.futures import ThreadPoolExecutor

    svc = overloaded

    # With the scheduler frozen nothing can finish, so the burst is refused over its limit
    # however fast the engine (a fast host used to serve all 32 in time): at most the waiting
    # limit, plus the running count the frontend last heard of, are let in.
    refused_at_least = 32 - MAX_WAITING - MAX_RUNNING
    with ThreadPoolExecutor(32) as pool, svc.run.paused("scheduler"):
        calls = [pool.submit(_grpc_call, svc) for _ in range(32)]
        svc.wait_metrics(lambda _: sum(c.done() for c in calls) >= refused_at_least,
                         what=f"{refused_at_least} of 32 gRPC calls refused")
    codes = [c.result() for c in calls]
    kinds = {c.split(":", 1)[0] for c in codes}
    assert kinds <= {"OK", "RESOURCE_EXHAUSTED"}, codes
    assert "RESOURCE_EXHAUSTED" in kinds, codes
    assert any("waiting queue is full" in c for c in codes), codes
    print(f"burst of 32 (gRPC): {sum(c != 'OK' for c in codes)} got RESOURCE_EXHAUSTED")
    m = overloaded.wait_metrics(is_idle, what="the service idle")
    assert is_idle(m), idle_view(m)


def test_grpc_needs_the_key_too(overloaded: Service) -> None:
    assert _grpc_call(overloaded, metadata=()).startswith("UNAUTHENTICATED")


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
