"""Soak: a bounded mix of streaming and non-streaming requests with random disconnects, stop
strings and max_tokens; then every answer is consistent, the engine is idle with no page leaked,
and no process kept the memory it used.

``make test`` runs the short soak; ``make soak`` the long one (MINISGL_SOAK_REQUESTS,
MINISGL_SOAK_CONCURRENCY, MINISGL_SOAK_TRANSPORTS choose its size and transports).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from reliability_load import make_plans, run_load
from reliability_support import (
    API_KEY,
    SOAK_MODE,
    Service,
    ServicePool,
    idle_view,
    is_idle,
    pages_leaked,
)

SHORT_REQUESTS, SHORT_CONCURRENCY = 150, 16
MEMORY_GROWTH_LIMIT = 0.10
WARMUP_ROUNDS = 2
@dataclass(frozen=True)
class SoakResult:
    """What a soak measured: the figures recorded, and the failures to report."""

    figures: dict[str, object]
    failures: tuple[str, ...]
    growth: dict[str, float]  # process -> RSS growth over the soak, as a fraction
    idle: bool


def soak(svc: Service, requests: int, concurrency: int, seed: int) -> SoakResult:
    """Warm up, measure memory, run the soak, wait for idle, measure again."""
    vocab = svc.vocab_size()
    for r in range(WARMUP_ROUNDS):  # the same mix, so allocator pools reach their working size
        warm = run_load(svc.url, svc.model,
                        make_plans(concurrency * 3, seed + 1000 + r, vocab_size=vocab),
                        concurrency)
        assert warm.failed == 0, warm.failures[:5]
        assert is_idle(svc.wait_metrics(is_idle, what="the service idle")), idle_view(svc.metrics())
    before = svc.rss()
    finished_before = svc.metrics()
    report = run_load(svc.url, svc.model, make_plans(requests, seed, vocab_size=vocab),
                      concurrency)
    m = svc.wait_metrics(is_idle, what="the service idle")
    after = svc.rss()
    growth = {k: (after[k] - before[k]) / before[k] for k in before}
    abort_key = 'minisgl_requests_finished_total{reason="abort"}'
    figures: dict[str, object] = {
        "transport": svc.spec.transport, "requests": report.sent, "concurrency": concurrency,
        "succeeded": report.succeeded, "failed": report.failed,
        "aborted_by_client": report.aborted,
        "aborted_in_engine": int(m.get(abort_key, 0) - finished_before.get(abort_key, 0)),
        "stop_string_hits": report.stop_hits, "pages_leaked": pages_leaked(m),
        "idle": is_idle(m), "seconds": round(report.seconds, 1),
        "max_memory_growth_pct": round(100 * max(growth.values()), 2),
        "memory_growth_pct": {k: round(100 * v, 2) for k, v in growth.items()},
        "rss_mb_after": {k: round(v / 2**20, 1) for k, v in after.items()},
    }
    _record("soak", figures)
    assert svc.alive(), svc.log()[-3000:]
    if not is_idle(m):
        figures["not_idle"] = idle_view(m)
    return SoakResult(figures, report.failures, growth, is_idle(m))


def check_soak(result: SoakResult, *, processes: tuple[str, ...]) -> None:
    """Zero failures, idle with every page back, memory of ``processes`` within the limit."""
    assert not result.failures, "\n".join(result.failures[:10])
    assert result.idle, result.figures
    grown = {p: g for p, g in result.growth.items() if p in processes and g > MEMORY_GROWTH_LIMIT}
    assert not grown, f"memory grew more than {MEMORY_GROWTH_LIMIT:.0%}: {result.figures}"


def _record(kind: str, figures: dict[str, object]) -> None:
    """Print the figures; append them to $MINISGL_RELIABILITY_OUT (JSON lines) when set."""
    line = json.dumps({"scenario": kind, "time": time.strftime("%Y-%m-%d %H:%M"), **figures})
    print(line)
    out = os.environ.get("MINISGL_RELIABILITY_OUT")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a") as f:
            f.write(line + "\n")


@pytest.fixture(scope="module")
def short_soak(pool: ServicePool) -> SoakResult:
    return soak(pool.get("zmq"), SHORT_REQUESTS, SHORT_CONCURRENCY, seed=11)


def test_short_soak(short_soak: SoakResult) -> None:
    check_soak(short_soak, processes=("launcher", "tokenizer", "detokenizer"))
    assert short_soak.figures["aborted_by_client"], "the mix should include disconnects"


def test_short_soak_scheduler_memory(short_soak: SoakResult) -> None:
    check_soak(short_soak, processes=("scheduler",))


@pytest.mark.slow
@pytest.mark.skipif(not SOAK_MODE, reason="runs with `make soak` (MINISGL_SOAK_REQUESTS set)")
@pytest.mark.parametrize("transport", os.environ.get("MINISGL_SOAK_TRANSPORTS",
                                                     "zmq,nng").split(","))
def test_long_soak(pool: ServicePool, transport: str) -> None:
    requests = int(os.environ["MINISGL_SOAK_REQUESTS"])
    concurrency = int(os.environ.get("MINISGL_SOAK_CONCURRENCY", "32"))
    result = soak(pool.get(transport), requests, concurrency, seed=2024)
    check_soak(result, processes=("launcher", "tokenizer", "detokenizer", "scheduler"))


def test_a_client_that_stops_reading_does_not_stall_others(pool: ServicePool) -> None:
    svc = pool.get("zmq")
    body = json.dumps({"model": svc.model, "prompt": "never read", "n": 8, "max_tokens": 200,
                       "ignore_eos": True, "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills after a few frames
    try:
        slow.connect(("127.0.0.1", svc.run.port))
        slow.settimeout(30)
        slow.sendall(head + body)
        assert slow.recv(12) == b"HTTP/1.1 200"  # streaming has begun; now stop reading
        plans = make_plans(32, seed=5, vocab_size=svc.vocab_size(), disconnect_rate=0)
        report = run_load(svc.url, svc.model, plans, concurrency=8)
        assert report.failed == 0, "\n".join(report.failures[:10])
        rest = b""  # the slow reader still gets its whole answer, late (chunked encoding)
        while not rest.endswith(b"\r\n0\r\n\r\n"):
            chunk = slow.recv(65536)
            assert chunk, f"the slow stream was cut after {len(rest)} bytes: {rest[-300:]!r}"
            rest += chunk
        assert b"data: [DONE]" in rest
        assert rest.count(b'"finish_reason":"length"') == 8
    finally:
        slow.close()
    m = svc.wait_metrics(is_idle, what="the service idle")
    assert is_idle(m), idle_view(m)
    assert svc.alive()
