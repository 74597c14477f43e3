"""/metrics: Prometheus text format, engine gauges, frontend counters and latency histograms."""

from __future__ import annotations

import math
import re
from typing import Any

import httpx
from minisgl_frontend_openai.metrics import FrontendMetrics

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
                    r'(\{[a-zA-Z_]+="[^"]*"(?:,[a-zA-Z_]+="[^"]*")*\})? (\S+)$')


def parse(text: str) -> tuple[dict[str, str], dict[str, float]]:
    """Check the exposition's syntax; return (family -> type, 'name{labels}' -> value)."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    helped: set[str] = set()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name in helped and name not in types and kind in {"gauge", "counter",
                                                                     "histogram"}
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, line
            name, labels, value = m.groups()
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in types or (family in types and types[family] == "histogram"), line
            key = name + (labels or "")
            assert key not in samples
            samples[key] = float(value)
    return types, samples


def histogram_ok(samples: dict[str, float], name: str) -> int:
    buckets = [(k, v) for k, v in samples.items() if k.startswith(name + "_bucket")]
    bounds = [float(re.search(r'le="([^"]+)"', k).group(1)) for k, _ in buckets]  # type: ignore
    counts = [v for _, v in buckets]
    assert bounds == sorted(bounds) and bounds[-1] == math.inf
    assert counts == sorted(counts)  # cumulative
    assert counts[-1] == samples[name + "_count"]
    return int(counts[-1])


def scrape(server: Any, http: httpx.Client) -> tuple[dict[str, str], dict[str, float]]:
    r = http.get(server.base + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse(r.text)


def test_metrics_exposition(server: Any, engine: Any, kit: Any, http: httpx.Client) -> None:
    assert kit.wait_for(lambda: server.frontend.metrics.inflight == 0)
    types, before = scrape(server, http)
    for name in ("requests_running", "requests_waiting", "kv_pages_total", "kv_pages_free"):
        assert types[f"minisgl_{name}"] == "gauge"
        assert before[f"minisgl_{name}"] == engine.gauges[name]
    assert types["minisgl_steps_total"] == "counter" and before["minisgl_steps_total"] == 7
    for name in ("minisgl_generation_tokens_total", "minisgl_prompt_tokens_total",
                 "minisgl_requests_finished_total"):
        assert types[name] == "counter"
    for reason in ("stop", "length", "abort", "error"):
        assert f'minisgl_requests_finished_total{{reason="{reason}"}}' in before
    for name in ("minisgl_time_to_first_token_seconds", "minisgl_time_per_output_token_seconds"):
        assert types[name] == "histogram"
        histogram_ok(before, name)

    r = http.post(server.url + "/completions",
                  json={"prompt": ["metrics one two", "metrics three"], "max_tokens": 5})
    assert r.status_code == 200
    http.post(server.url + "/completions", json={"prompt": "metrics natural"})
    http.post(server.url + "/completions", json={"prompt": " ".join(["w"] * 300)})
    _, after = scrape(server, http)

    def delta(key: str) -> float:
        return after[key] - before[key]

    assert delta("minisgl_prompt_tokens_total") == 3 + 2 + 2  # the rejected prompt not counted
    assert delta("minisgl_generation_tokens_total") == 5 + 5 + 12
    assert delta('minisgl_requests_finished_total{reason="length"}') == 2
    assert delta('minisgl_requests_finished_total{reason="stop"}') == 1
    assert delta('minisgl_requests_finished_total{reason="error"}') == 1
    assert delta("minisgl_time_to_first_token_seconds_count") == 3
    assert delta("minisgl_time_per_output_token_seconds_count") == 3
    assert histogram_ok(after, "minisgl_time_to_first_token_seconds") \
        == after["minisgl_time_to_first_token_seconds_count"]
    assert after["minisgl_frontend_requests_inflight"] == 0


def test_missing_engine_gauges_are_nan_and_names_are_sanitized() -> None:
    metrics = FrontendMetrics()
    metrics.record_finish("stop", prompt_tokens=4, completion_tokens=3, ttft=0.2, tpot=0.01)
    types, samples = parse(metrics.render({"kv_pages_free": 3, "weird-name.x": 1.5,
                                           "minisgl_prompt_tokens_total": 99}))
    assert math.isnan(samples["minisgl_requests_running"])
    assert samples["minisgl_kv_pages_free"] == 3 and samples["minisgl_weird_name_x"] == 1.5
    assert samples["minisgl_prompt_tokens_total"] == 4  # the frontend's own counter wins
    assert samples['minisgl_time_to_first_token_seconds_bucket{le="0.25"}'] == 1
    assert samples['minisgl_time_to_first_token_seconds_bucket{le="0.1"}'] == 0
    assert samples["minisgl_time_per_output_token_seconds_sum"] == 0.01
    assert types["minisgl_weird_name_x"] == "gauge"
