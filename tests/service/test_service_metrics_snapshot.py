"""/metrics is one moment of the scheduler: a scrape during requests never shows running
requests without the KV pages they hold, nor pages held with nothing running or waiting."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service, parse_metrics

REQUESTS = 24
CONCURRENCY = 6


@pytest.fixture(scope="module", params=["continuous", "synthetic"])
def scheduled(request: pytest.FixtureRequest, tiny_model: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """The tiny model on the real engine, and the synthetic scheduler (paced, so requests
    overlap and queue whatever the host's speed)."""
    extra = ([] if request.param == "continuous" else
             ["--scheduler", "synthetic", "-s", "roles.scheduler.synthetic.tokens_per_s=200"])
    # 24 pages of 16 tokens: four requests of up to 92 tokens fill the pool and others wait
    args = ["--max-seq-len-override", "512", "--num-pages", "24", "--page-size", "16", *extra]
    svc = launch_service(tiny_model, args=args, log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def inconsistency(m: dict[str, float]) -> str | None:
    """What is wrong with one scrape's scheduler gauges, or None."""
    running, waiting = m["minisgl_requests_running"], m["minisgl_requests_waiting"]
    total, free = m["minisgl_kv_pages_total"], m["minisgl_kv_pages_free"]
    if not (0 <= free <= total and running >= 0 and waiting >= 0):
        return "a gauge out of its range"
    if total - free < running:  # every running request holds at least one page
        return f"{running:.0f} running with {total - free:.0f} pages in use"
    if running == waiting == 0 and free != total:
        return f"nothing running or waiting, yet {total - free:.0f} pages in use"
    return None


def _scraped_during_load(scheduled: RunningService) -> list[dict[str, float]]:
    """Every /metrics scrape taken, back to back, while REQUESTS requests ran CONCURRENCY at a
    time."""
    name = scheduled.model_name()
    done = threading.Event()
    scrapes: list[dict[str, float]] = []
    failures: list[str] = []

    def scrape() -> None:
        with httpx.Client(timeout=60) as http:
            while not done.is_set() and len(scrapes) < 5000:
                scrapes.append(parse_metrics(http.get(f"{scheduled.url}/metrics").text))

    def client(first: int) -> None:
        with httpx.Client(timeout=120) as http:
            for i in range(first, REQUESTS, CONCURRENCY):
                r = http.post(f"{scheduled.url}/v1/completions", json={
                    "model": name, "prompt": [5 + i, 6, 7], "max_tokens": 20 + 3 * i,
                    "ignore_eos": True})
                if r.status_code != 200:
                    failures.append(r.text)

    scraper = threading.Thread(target=scrape)
    clients = [threading.Thread(target=client, args=(k,)) for k in range(CONCURRENCY)]
    scraper.start()
    for t in clients:
        t.start()
    for t in clients:
        t.join(300)
    done.set()
    scraper.join(60)
    assert not failures, failures[:3]
    return scrapes


def test_a_scrape_never_shows_running_requests_without_their_pages(
        scheduled: RunningService) -> None:
    # the scheduler reports its gauges every 0.1 s while busy: on a fast host the tiny model can
    # serve all the requests between two reports, so the load runs again (at most 3 times) until
    # a scrape has seen requests running; every scrape of every run must be consistent
    scrapes: list[dict[str, float]] = []
    for _ in range(3):
        scrapes += _scraped_during_load(scheduled)
        if any(m["minisgl_requests_running"] > 0 for m in scrapes):
            break
    busy = [m for m in scrapes if m["minisgl_requests_running"] > 0]
    assert busy, f"no scrape of {len(scrapes)} saw a running request"
    bad = [(why, m) for m in scrapes if (why := inconsistency(m))]
    assert not bad, f"{len(bad)} of {len(scrapes)} scrapes inconsistent, first: {bad[0][0]}"
    scheduled.wait_metrics(lambda m: m["minisgl_requests_running"] == 0
                           and m["minisgl_kv_pages_free"] == m["minisgl_kv_pages_total"],
                           what="the service idle, every page free")
