"""`--dp 2`: both replicas get work, a shared prefix stays on one replica, an abort soak leaves
every replica idle with every page free, and a replica killed outright stops the service."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service

RECEIVED = "minisgl_scheduler_requests_received_total"


@pytest.fixture(scope="module")
def service(launch_variant: Any) -> Iterator[RunningService]:
    """One `--dp 2` service of the tiny model for the module."""
    with launch_variant("zmq", "--dp", "2") as svc:
        yield svc


def replica(m: dict[str, float], name: str, default: float | None = None) -> list[float]:
    """``name`` of replica 0 and 1 (``default`` for a counter not reported yet)."""
    keys = [f'{name}{{dp_rank="{i}"}}' for i in range(2)]
    return [m[k] if default is None else m.get(k, default) for k in keys]


def chat(service: RunningService, content: str, max_tokens: int = 4) -> None:
    r = httpx.post(f"{service.url}/v1/chat/completions", timeout=60, json={
        "model": service.model_name(), "max_tokens": max_tokens, "temperature": 0,
        "messages": [{"role": "user", "content": content}]})
    assert r.status_code == 200, r.text


def idle(m: dict[str, float]) -> bool:
    return (all(v == 0 for v in replica(m, "minisgl_requests_running")
                + replica(m, "minisgl_requests_waiting"))
            and replica(m, "minisgl_kv_pages_free") == replica(m, "minisgl_kv_pages_total")
            and m["minisgl_frontend_requests_inflight"] == 0
            and m.get("minisgl_detokenizer_requests_active", 0) == 0)


def test_both_replicas_get_work_and_the_totals_add_up(service: RunningService) -> None:
    before = replica(service.metrics(), RECEIVED)
    passed_on = service.metrics()["minisgl_tokenizer_requests_total"]
    with ThreadPoolExecutor(8) as ex:
        # frozen, the replicas report nothing: the dispatcher balances by what it sent
        with service.paused("scheduler"):
            done = [ex.submit(chat, service, f"question {i}") for i in range(8)]
            service.wait_metrics(lambda m: m["minisgl_tokenizer_requests_total"] >= passed_on + 8,
                                 what="8 requests passed on to the replicas")
        for f in done:
            f.result()
    m = service.wait_metrics(idle, what="both replicas idle")
    gained = [a - b for a, b in zip(replica(m, RECEIVED), before, strict=True)]
    assert gained == [4, 4]
    assert m[RECEIVED] == sum(replica(m, RECEIVED))  # the unlabelled name is the total
    assert m["minisgl_kv_pages_total"] == sum(replica(m, "minisgl_kv_pages_total"))
    load = httpx.get(f"{service.url}/get_load", timeout=10).json()
    assert [e["dp_rank"] for e in load] == [0, 1]
    info = httpx.get(f"{service.url}/server_info", timeout=10).json()
    assert info["dp_size"] == 2
    rows = httpx.get(f"{service.url}/v1/engine/stats", timeout=10).json()["replicas"]
    assert [(r["dp_rank"], r["requests_total"]) for r in rows] == [
        (i, n) for i, n in enumerate(replica(m, RECEIVED))]  # the dashboard's replica table


def test_a_shared_prefix_stays_on_one_replica(service: RunningService) -> None:
    prefix = "You are a careful assistant who answers in one word. " * 6  # several KV pages
    before = service.wait_metrics(idle, what="both replicas idle")
    for i in range(6):
        chat(service, f"{prefix} question {i}")
    after = service.wait_metrics(idle, what="both replicas idle")
    gained = [a - b for a, b in zip(replica(after, RECEIVED), replica(before, RECEIVED),
                                    strict=True)]
    assert sorted(gained) == [0, 6], gained
    holder = gained.index(6)
    hits = replica(after, "minisgl_prefix_cache_hit_tokens_total")[holder] - replica(
        before, "minisgl_prefix_cache_hit_tokens_total")[holder]
    assert hits >= 5 * 16, "the replica holding the prefix did not reuse its pages"


def test_abort_soak_ends_with_every_replica_idle(service: RunningService) -> None:
    model = service.model_name()
    errors: list[str] = []
    lock = threading.Lock()
    aborts = "minisgl_scheduler_finished_abort_total"
    before = replica(service.metrics(), aborts, 0.0)

    def run(i: int) -> None:
        abort = i % 2 == 0
        body = {"model": model, "max_tokens": 400 if abort else 8, "stream": True,
                "ignore_eos": True, "messages": [{"role": "user", "content": f"soak {i} " * 3}]}
        try:
            with httpx.stream("POST", f"{service.url}/v1/chat/completions", json=body,
                              timeout=60) as resp:
                frames = 0
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        assert '"error"' not in line, line
                        frames += 1
                        if abort and frames >= 3:
                            return  # closing the stream aborts the request
                assert frames >= 2
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            with lock:
                errors.append(f"request {i}: {exc!r}")

    # 20 of each round's 40 are aborted, on both replicas, unless the tiny model (400 tokens in
    # well under a second) finishes them before a slow client closes its stream: on a loaded
    # host another round is run, up to 5
    for round_ in range(5):
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(run, range(40 * round_, 40 * round_ + 40)))
        assert errors == []
        m = service.wait_metrics(idle, what="both replicas idle, every page free")
        aborted = [a - b for a, b in zip(replica(m, aborts, 0.0), before, strict=True)]
        if sum(aborted) >= 10 and all(a > 0 for a in aborted):
            break
    else:
        pytest.fail(f"aborted {aborted} per replica in 5 rounds: under 10, or none on one")


# The synthetic scheduler at 20 tokens/s: a 400-token answer is still streaming when killed.
PACED = ["--scheduler", "synthetic", "-s", "roles.scheduler.synthetic.tokens_per_s=20",
         "--max-seq-len-override", "512", "--num-pages", "128"]


def test_a_killed_replica_fails_its_requests_and_stops_the_service(
        tiny_model: str, tmp_path: Path) -> None:
    # round robin: the two identical prompts go one to each replica (affinity would pair them)
    svc = launch_service(tiny_model, args=[*PACED, "--dp", "2", "-s", "dp_policy=round_robin"],
                         log_dir=tmp_path)
    try:
        body = {"model": svc.model_name(), "max_tokens": 400, "stream": True,
                "ignore_eos": True, "messages": [{"role": "user", "content": "go"}]}
        streams: list[list[str]] = [[], []]
        started = [threading.Event(), threading.Event()]

        def stream(i: int) -> None:
            with httpx.stream("POST", f"{svc.url}/v1/chat/completions", json=body,
                              timeout=60) as resp:
                for line in resp.iter_lines():
                    streams[i].append(line)
                    if len(streams[i]) == 4:
                        started[i].set()

        with ThreadPoolExecutor(2) as ex:
            done = [ex.submit(stream, i) for i in range(2)]
            for ev in started:
                assert ev.wait(60), "a stream did not start within 60 s"
            # one on each replica; the gauges reach /metrics a report interval after the step
            svc.wait_metrics(lambda m: replica(m, "minisgl_requests_running") == [1, 1],
                             timeout=30, what="one request running on each replica")
            svc.workers()["scheduler-dp1"].kill()
            for f in done:
                f.result(timeout=60)
        for lines in streams:
            assert any(line.startswith('data: {"error"') for line in lines), lines[-4:]
        svc.assert_ended_after_death("scheduler-dp1")
    finally:
        svc.stop(signal.SIGKILL)
