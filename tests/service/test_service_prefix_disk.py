"""`minisgl launch --prefix-cache-dir`: a restarted service serves a prompt it saw from disk, with
the same greedy ids, and /metrics counts the hits, misses and bytes of both tiers."""

from __future__ import annotations

import random
import time
from pathlib import Path

import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service

from .conftest import SERVICE_ARGS

PROMPT = [random.Random(3).randrange(5, 250) for _ in range(100)]
FULL_PAGES = (len(PROMPT) - 1) // 16  # --page-size 16; the last token is always computed


def _complete(svc: RunningService) -> list[int]:
    body = {"model": svc.model_name(), "prompt": PROMPT, "max_tokens": 8, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    r = httpx.post(f"{svc.url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return list(r.json()["choices"][0]["token_ids"])


def _wait_files(directory: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list(directory.rglob("*.kvp"))) < count:
        assert time.monotonic() < deadline, f"fewer than {count} page files in {directory}"
        time.sleep(0.05)


def test_a_restarted_service_serves_the_prefix_from_disk(
        tiny_model: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    args = [*SERVICE_ARGS, "--prefix-cache-dir", str(tmp_path), "--prefix-cache-disk-gb", "1"]
    results = []
    for run in range(2):
        svc = launch_service(tiny_model, args=args, log_dir=tmp_path_factory.mktemp("logs"))
        try:
            results.append(_complete(svc))
            if run == 0:
                m = svc.wait_metrics(lambda m: m.get("minisgl_prefix_cache_ram_miss_tokens_total",
                                                     0) >= len(PROMPT), what="a RAM miss")
                assert m["minisgl_prefix_cache_disk_hit_tokens_total"] == 0
                _wait_files(tmp_path, FULL_PAGES)  # written in the background
            else:
                m = svc.wait_metrics(
                    lambda m: m.get("minisgl_prefix_cache_disk_hit_tokens_total", 0) > 0,
                    what="a disk hit")
                assert m["minisgl_prefix_cache_disk_hit_tokens_total"] == FULL_PAGES * 16
                assert m["minisgl_prefix_cache_disk_read_bytes_total"] > 0
                assert m["minisgl_prefix_cache_disk_bytes"] > 0
                assert m["minisgl_prefix_cache_ram_bytes"] > 0
        finally:
            svc.stop()
            assert not svc.leftover_workers(), f"orphan workers:\n{svc.log()[-2000:]}"
    assert results[0] == results[1]
