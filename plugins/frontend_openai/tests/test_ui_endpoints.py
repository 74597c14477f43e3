"""The web page and its JSON endpoints: one self-contained document, stats sampled on demand."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import re
from typing import Any

import httpx
from minisgl_frontend_openai.engine_stats import StatsHistory
from minisgl_frontend_openai.metrics import FrontendMetrics


def test_page_is_one_self_contained_document(server: Any, http: httpx.Client) -> None:
    for path in ("/", "/ui"):
        r = http.get(server.base + path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        html = r.text
        assert 'id="view-chat"' in html and 'id="view-dashboard"' in html
        assert "data-inline" not in html  # every style and script was inlined
        # nothing is fetched from elsewhere: no external src/href, only same-origin API calls
        assert not re.search(r'(src|href)="(https?:)?//', html)
        # the only URL in it is the SVG namespace of the inline icon
        assert re.findall(r"https?://[^'\"\s]*", html) == ["http://www.w3.org/2000/svg"]
        csp = r.headers["content-security-policy"]
        scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
        assert len(scripts) == 5
        allowed = set(re.findall(r"'sha256-([^']+)'", csp))
        for body in scripts:  # each inline script runs only because its hash is allowed
            assert base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() in allowed
        assert "connect-src 'self'" in csp and "'unsafe-eval'" not in csp


def test_stats_endpoint_shape_and_since(server: Any, http: httpx.Client, engine: Any) -> None:
    r = http.get(server.base + "/v1/engine/stats")
    assert r.status_code == 200
    body = r.json()
    assert body["model"] == engine.model_name and body["healthy"] is True
    assert body["samples"], "the first call takes a sample"
    last = body["samples"][-1]
    assert last["running"] == engine.gauges["requests_running"]
    assert last["kv_total"] == 64 and last["kv_free"] == 60 and last["kv_used"] == 4
    later = http.get(server.base + "/v1/engine/stats", params={"since": last["t"]}).json()
    assert all(s["t"] > last["t"] for s in later["samples"])
    for bad in ("abc", "nan", "inf"):
        r = http.get(server.base + "/v1/engine/stats", params={"since": bad})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "since"


def test_info_names_the_model_and_the_plugins(server: Any, http: httpx.Client,
                                              engine: Any) -> None:
    info = http.get(server.base + "/v1/engine/info").json()
    assert info["model"] == engine.model_name and info["max_context"] == engine.max_context
    assert "quantization" not in info  # the test config has none: omitted, not null
    rows = {p["name"]: p for p in info["plugins"]}
    assert rows["frontend_openai"]["dist"] == "minisgl-frontend-openai"
    assert rows["frontend_openai"]["version"] and "frontend:openai" in \
        rows["frontend_openai"]["provides"]


def test_api_key_guards_the_data_but_not_the_page(keyed_server: Any, http: httpx.Client) -> None:
    for path in ("/", "/ui"):
        assert http.get(keyed_server.base + path).status_code == 200
    auth = {"Authorization": "Bearer sk-test-key"}
    for path in ("/v1/engine/stats", "/v1/engine/info"):
        r = http.get(keyed_server.base + path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert http.get(keyed_server.base + path, headers=auth).status_code == 200


def test_stats_start_no_background_work(http: httpx.Client, kit: Any) -> None:
    async def tasks() -> int:
        return len(asyncio.all_tasks())

    server = kit.RunningServer(kit.ScriptedEngineClient())  # one nobody has looked at yet
    try:
        baseline = server.call(tasks())
        for _ in range(5):
            assert http.get(server.base + "/v1/engine/stats").status_code == 200
            assert http.get(server.base + "/").status_code == 200
        # nothing keeps running once the answers are sent: no poller, no timer
        assert kit.wait_for(lambda: server.call(tasks()) <= baseline)
    finally:
        server.stop()


def test_history_rates_are_counter_differences() -> None:
    frontend = FrontendMetrics()
    history = StatsHistory(horizon_s=10, min_interval_s=0.5)
    engine = {"scheduler_generation_tokens_total": 100.0, "scheduler_prompt_tokens_total": 50.0,
              "prefix_cache_hit_tokens_total": 10.0, "kv_pages_total": 32.0,
              "kv_pages_free": 20.0, "kv_pages_cached": 6.0, "requests_running": 3.0,
              "requests_waiting": math.nan}
    history.sample(1000.0, engine, frontend)
    history.sample(1000.2, {**engine, "scheduler_generation_tokens_total": 999.0}, frontend)
    assert len(history.samples) == 1  # under min_interval_s: not sampled again
    frontend.record_finish("stop", prompt_tokens=4, completion_tokens=2, ttft=0.3, tpot=0.1)
    frontend.record_finish("stop", prompt_tokens=4, completion_tokens=2, ttft=0.1, tpot=0.1)
    history.sample(1002.0, {**engine, "scheduler_generation_tokens_total": 140.0,
                            "scheduler_prompt_tokens_total": 90.0,
                            "prefix_cache_hit_tokens_total": 20.0}, frontend)
    first, second = history.since(None)
    assert first["dt"] == 0 and first["tokens_per_s"] == 0 and first["hit_rate"] is None
    assert second["dt"] == 2.0 and second["tokens_per_s"] == 20.0
    assert second["prompt_tokens_per_s"] == 20.0 and second["hit_rate"] == 0.25
    assert first["hit_rate_total"] == 0.2 and second["hit_rate_total"] == 20 / 90
    assert second["ttft_s"] == 0.2 and second["waiting"] == 0  # NaN gauges read as 0
    assert second["kv_used"] == 12 and second["kv_cached"] == 6
    assert history.since(1000.0) == [second]
    history.sample(1020.0, engine, frontend)  # past the horizon: the old samples are dropped
    assert [s["t"] for s in history.since(None)] == [1020.0]
