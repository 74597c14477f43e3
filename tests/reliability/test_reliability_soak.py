"""Soak: a bounded mix of streaming and non-streaming requests with random disconnects, stop
strings and max_tokens; then every answer is consistent, the engine is idle with no page leaked,
and no process kept the memory it used.

``make test`` runs the short soak; ``make soak`` the long one (MINISGL_SOAK_REQUESTS,
MINISGL_SOAK_CONCURRENCY, MINISGL_SOAK_TRANSPORTS choose its size and transports).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from reliability_load import make_plans, run_load
from reliability_support import Service, ServicePool, idle_view, is_idle, pages_leaked

SHORT_REQUESTS, SHORT_CONCURRENCY = 150, 16
MEMORY_GROWTH_LIMIT = 0.10
WARMUP_ROUNDS = 3


def soak(svc: Service, requests: int, concurrency: int, seed: int) -> dict[str, object]:
    """Warm up, measure memory, run the soak, wait for idle, measure again; return figures."""
    vocab = svc.vocab_size()
    for r in range(WARMUP_ROUNDS):  # the same mix, so allocator pools reach their working size
        warm = run_load(svc.url, svc.model,
                        make_plans(concurrency * 3, seed + 1000 + r, vocab_size=vocab),
                        concurrency)
        assert warm.failed == 0, warm.failures[:5]
        assert is_idle(svc.wait_metrics(is_idle, 10)), idle_view(svc.metrics())
    before = svc.rss()
    finished_before = svc.metrics()
    report = run_load(svc.url, svc.model, make_plans(requests, seed, vocab_size=vocab),
                      concurrency)
    m = svc.wait_metrics(is_idle, 10)
    after = svc.rss()
    growth = {k: (after[k] - before[k]) / before[k] for k in before}
    aborted_server = (m.get('minisgl_requests_finished_total{reason="abort"}', 0)
                      - finished_before.get('minisgl_requests_finished_total{reason="abort"}', 0))
    figures: dict[str, object] = {
        "transport": svc.spec.transport, "requests": report.sent, "concurrency": concurrency,
        "succeeded": report.succeeded, "failed": report.failed,
        "aborted_by_client": report.aborted, "aborted_in_engine": int(aborted_server),
        "pages_leaked": pages_leaked(m), "idle": is_idle(m), "seconds": round(report.seconds, 1),
        "max_memory_growth_pct": round(100 * max(growth.values()), 2),
        "memory_growth_pct": {k: round(100 * v, 2) for k, v in growth.items()},
        "rss_mb_after": {k: round(v / 2**20, 1) for k, v in after.items()},
    }
    _record("soak", figures)
    assert report.failed == 0, "\n".join(report.failures[:10])
    assert is_idle(m), idle_view(m)
    assert max(growth.values()) <= MEMORY_GROWTH_LIMIT, figures
    assert svc.alive()
    return figures


def _record(kind: str, figures: dict[str, object]) -> None:
    """Print the figures; append them to $MINISGL_RELIABILITY_OUT (JSON lines) when set."""
    line = json.dumps({"scenario": kind, "time": time.strftime("%Y-%m-%d %H:%M"), **figures})
    print(line)
    out = os.environ.get("MINISGL_RELIABILITY_OUT")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a") as f:
            f.write(line + "\n")


def test_short_soak(pool: ServicePool) -> None:
    figures = soak(pool.get("zmq"), SHORT_REQUESTS, SHORT_CONCURRENCY, seed=11)
    assert figures["aborted_by_client"], "the mix should include disconnects"


@pytest.mark.slow
@pytest.mark.parametrize("transport", os.environ.get("MINISGL_SOAK_TRANSPORTS",
                                                     "zmq,nng").split(","))
def test_long_soak(pool: ServicePool, transport: str) -> None:
    requests = os.environ.get("MINISGL_SOAK_REQUESTS")
    if not requests:
        pytest.skip("the long soak runs with `make soak` (set MINISGL_SOAK_REQUESTS)")
    concurrency = int(os.environ.get("MINISGL_SOAK_CONCURRENCY", "32"))
    soak(pool.get(transport), int(requests), concurrency, seed=2024)
