"""/get_load, /server_info, /model_info and the router-named gauges on /metrics."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

LABELS = re.compile(r'\{([a-zA-Z_]+="[^"]*")(,[a-zA-Z_]+="[^"]*")*\}')
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def samples(text: str) -> dict[str, float]:
    """'name{labels}' -> value of every sample line (TYPE/HELP lines checked to precede)."""
    typed: set[str] = set()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, line
            name, labels, value = m.groups()
            assert labels is None or LABELS.fullmatch(labels), line
            assert re.sub(r"_(bucket|sum|count)$", "", name) in typed or name in typed, line
            out[name + (labels or "")] = float(value)
    return out


@pytest.fixture
def paged(engine_state: Any) -> Iterator[Any]:
    """The shared double reporting a page size and 10 of 64 pages held by requests."""
    saved = dict(engine_state.gauges)
    engine_state.gauges.update({"kv_page_size": 16.0, "kv_pages_total": 64.0,
                                "kv_pages_free": 54.0, "requests_running": 3.0,
                                "requests_waiting": 2.0})
    yield engine_state
    engine_state.gauges.clear()
    engine_state.gauges.update(saved)


def test_get_load_counts_polls_and_reports_the_sglang_shape(server: Any, paged: Any,
                                                             http: httpx.Client) -> None:
    before = samples(http.get(server.base + "/metrics").text)["minisgl_get_load_requests_total"]
    r = http.get(server.base + "/get_load")
    assert r.status_code == 200
    assert r.json() == [{"dp_rank": 0, "num_reqs": 5, "num_waiting_reqs": 2,
                         "num_tokens": 10 * 16}]
    after = samples(http.get(server.base + "/metrics").text)["minisgl_get_load_requests_total"]
    assert after == before + 1


def test_server_and_model_info_name_the_served_model(server: Any, paged: Any,
                                                     http: httpx.Client) -> None:
    for path in ("/server_info", "/get_server_info"):
        info = http.get(server.base + path).json()
        assert info["model_id"] == "scripted-model" and info["dp_size"] == 1
        assert info["max_total_tokens"] == 64 * 16 and info["context_length"] == 256
        assert isinstance(info["version"], str) and info["version"]
    for path in ("/model_info", "/get_model_info"):
        info = http.get(server.base + path).json()
        assert info["model_path"] == "scripted-model" and info["is_generation"] is True
        assert info["max_context_length"] == 256


def test_metrics_have_the_vllm_names_and_no_sglang_ones_by_default(server: Any, paged: Any,
                                                                    http: httpx.Client) -> None:
    got = samples(http.get(server.base + "/metrics").text)
    assert got["vllm:num_requests_waiting"] == 2 and got["vllm:num_requests_running"] == 3
    assert got["vllm:kv_cache_usage_perc"] == pytest.approx(10 / 64)
    assert got['vllm:cache_config_info{block_size="16",num_gpu_blocks="64"}'] == 1
    assert not [k for k in got if k.startswith("sglang:")]


def test_sglang_names_behind_the_option(kit: Any, http: httpx.Client) -> None:
    client = kit.ScriptedEngineClient()
    client.gauges.update({"kv_pages_total": 40.0, "kv_pages_free": 30.0})
    running = kit.RunningServer(client, options={"sglang_metrics": True}, model="org/some-model")
    try:
        got = samples(http.get(running.base + "/metrics").text)
        assert got["sglang:num_queue_reqs"] == 1 and got["sglang:num_running_reqs"] == 2
        assert got["sglang:token_usage"] == pytest.approx(0.25)
        assert got["vllm:kv_cache_usage_perc"] == pytest.approx(0.25)
        # no page size reported: no cache_config_info rather than a made-up one
        assert not [k for k in got if k.startswith("vllm:cache_config_info")]
        assert http.get(running.base + "/model_info").json()["model_path"] == "org/some-model"
    finally:
        running.stop()


def test_health_follows_every_worker(server: Any, engine_state: Any, http: httpx.Client) -> None:
    assert http.get(server.base + "/health").status_code == 200
    engine_state.is_healthy = False  # the client reports a worker down
    assert http.get(server.base + "/health").status_code == 503
