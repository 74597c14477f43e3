"""The dashboard's time series: samples of the /metrics numbers, taken only when someone asks.

No timer runs: each GET of ``/v1/engine/stats`` takes at most one sample (``min_interval_s``
apart, so several open pages share them) and answers with the samples the caller has not seen.
A service nobody looks at does no work for this at all. Rates (tokens/s, prefix-cache hit rate,
mean TTFT) are differences of the same counters /metrics exports, between consecutive samples.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from minisgl_frontend_openai.metrics import FrontendMetrics
from minisgl_frontend_openai.router_routes import replicas

HORIZON_S = 300.0  # how far back the charts look
MIN_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Totals:
    """The counters one sample's rates are differences of."""

    generation_tokens: float
    prompt_tokens: float
    cache_hit_tokens: float
    ttft_sum: float
    ttft_count: int


@dataclass(frozen=True)
class Sample:
    """One point of every chart; a rate is ``None`` when nothing happened to measure it."""

    t: float  # unix time, seconds
    dt: float  # seconds since the previous sample (0 for the first)
    tokens_per_s: float  # generated tokens per second over dt
    prompt_tokens_per_s: float
    running: float
    waiting: float
    kv_total: float
    kv_used: float  # pages held by requests (total - allocatable)
    kv_cached: float  # pages held by the prefix cache
    kv_free: float  # allocatable now (free, or cached and used by no request)
    hit_rate: float | None  # share of admitted prompt tokens the prefix cache supplied in dt
    hit_rate_total: float | None  # the same since the service started
    ttft_s: float | None  # mean time to first token of the requests that finished in dt


def totals(engine: Mapping[str, float], frontend: FrontendMetrics) -> Totals:
    """The counters now: the scheduler's own when it reports them (they move every step), else
    the frontend's (they move when a request finishes)."""
    return Totals(
        generation_tokens=engine.get("scheduler_generation_tokens_total",
                                     float(frontend.generation_tokens)),
        prompt_tokens=engine.get("scheduler_prompt_tokens_total", float(frontend.prompt_tokens)),
        cache_hit_tokens=engine.get("prefix_cache_hit_tokens_total", 0.0),
        ttft_sum=frontend.ttft.sum, ttft_count=frontend.ttft.count)


class StatsHistory:
    """Samples over the last ``horizon_s`` seconds, appended on demand."""

    def __init__(self, horizon_s: float = HORIZON_S, min_interval_s: float = MIN_INTERVAL_S):
        self.horizon_s = horizon_s
        self.min_interval_s = min_interval_s
        # kept as the dicts the endpoint sends: a page's first call may ask for all of them
        self.samples: deque[dict[str, float | None]] = deque()
        self._last: tuple[float, Totals] | None = None

    def sample(self, now: float, engine: Mapping[str, float], frontend: FrontendMetrics) -> None:
        """Take a sample at ``now`` unless the previous one is under ``min_interval_s`` old."""
        if self._last is not None and now - self._last[0] < self.min_interval_s:
            return
        cur = totals(engine, frontend)
        if self._last is None:
            dt, prev = 0.0, cur
        else:
            dt, prev = now - self._last[0], self._last[1]
        self._last = (now, cur)
        total = _num(engine.get("kv_pages_total"))
        free = _num(engine.get("kv_pages_free"))
        prompt = cur.prompt_tokens - prev.prompt_tokens
        ttft_n = cur.ttft_count - prev.ttft_count
        self.samples.append(asdict(Sample(
            t=now, dt=dt,
            tokens_per_s=_rate(cur.generation_tokens - prev.generation_tokens, dt),
            prompt_tokens_per_s=_rate(prompt, dt),
            running=_num(engine.get("requests_running")),
            waiting=_num(engine.get("requests_waiting")),
            kv_total=total, kv_used=max(total - free, 0.0),
            kv_cached=_num(engine.get("kv_pages_cached")), kv_free=free,
            hit_rate=min((cur.cache_hit_tokens - prev.cache_hit_tokens) / prompt, 1.0)
            if prompt > 0 else None,
            hit_rate_total=min(cur.cache_hit_tokens / cur.prompt_tokens, 1.0)
            if cur.prompt_tokens > 0 else None,
            ttft_s=(cur.ttft_sum - prev.ttft_sum) / ttft_n if ttft_n > 0 else None)))
        while self.samples and self.samples[0]["t"] < now - self.horizon_s:  # type: ignore[operator]
            self.samples.popleft()

    def since(self, t: float | None) -> list[dict[str, float | None]]:
        """The samples taken after ``t`` (all of them for ``None``), as JSON-ready dicts."""
        if t is None:
            return list(self.samples)
        return [s for s in self.samples if s["t"] > t]  # type: ignore[operator]


def current(engine: Mapping[str, float], frontend: FrontendMetrics) -> dict[str, float | None]:
    """Cumulative figures for the dashboard's tiles (NaN-free: missing gauges are 0)."""
    cur = totals(engine, frontend)
    finished = dict(frontend.finished)
    return {
        "generation_tokens_total": cur.generation_tokens,
        "prompt_tokens_total": cur.prompt_tokens,
        "prefix_cache_hit_tokens_total": cur.cache_hit_tokens,
        # of those, loaded from the prefix cache's disk tier (0 without one)
        "prefix_cache_disk_hit_tokens_total": _num(
            engine.get("prefix_cache_disk_hit_tokens_total")),
        "requests_finished_total": float(sum(finished.values())),
        "requests_aborted_total": float(finished.get("abort", 0)),
        "requests_inflight": float(frontend.inflight),
        "ttft_mean_s": cur.ttft_sum / cur.ttft_count if cur.ttft_count else None,
        "batch_peak": _num(engine.get("scheduler_batch_peak")),
        "spec_draft_tokens_total": _num(engine.get("spec_draft_tokens_total")),
        "spec_accepted_tokens_total": _num(engine.get("spec_accepted_tokens_total")),
    }


def replica_rows(engine: Mapping[str, float]) -> list[dict[str, float | None]]:
    """Each scheduler replica's gauges for the dashboard's table under ``--dp N`` (none for one
    scheduler): requests, KV pages in use, and its prefix-cache hit rate since start."""
    rows = replicas(engine)
    if len(rows) < 2:
        return []
    out: list[dict[str, float | None]] = []
    for rank, r in enumerate(rows):
        total, prompt = _num(r.get("kv_pages_total")), _num(r.get("scheduler_prompt_tokens_total"))
        out.append({"dp_rank": rank, "running": _num(r.get("requests_running")),
                    "waiting": _num(r.get("requests_waiting")), "kv_total": total,
                    "kv_used": max(total - _num(r.get("kv_pages_free")), 0.0),
                    "requests_total": _num(r.get("scheduler_requests_received_total")),
                    "hit_rate_total": min(_num(r.get("prefix_cache_hit_tokens_total")) / prompt,
                                          1.0) if prompt > 0 else None})
    return out


def _num(value: float | None) -> float:
    return 0.0 if value is None or math.isnan(value) else float(value)


def _rate(delta: float, dt: float) -> float:
    return delta / dt if dt > 0 else 0.0
