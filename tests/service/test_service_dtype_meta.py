"""``--dtype auto`` over HTTP: /v1/models' meta and the dashboard's info say what it chose, why
(and how the scheduler's idle OpenMP threads wait)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import httpx
import pytest

from minisgl_core.service import omp_wait
from minisgl_core.testing.service import RunningService, launch_service


@pytest.fixture(scope="module")
def auto(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    svc = launch_service(tiny_model, args=["--dtype", "auto"],
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


def test_models_meta_names_the_dtype_auto_chose_and_why(auto: RunningService) -> None:
    card = httpx.get(f"{auto.url}/v1/models", timeout=30).json()["data"][0]
    meta = card["meta"]
    assert meta["dtype"] in ("float32", "bfloat16")
    assert meta["dtype_reason"].startswith("auto: ")
    assert meta["quantization"] == "none" and "qkv" in meta["kernels"]
    # no --quantization: auto, which serves an HF checkpoint (not from a GGUF) as it is
    assert meta["quantization_reason"].startswith("auto: not converted from a GGUF")
    # the matmul weights' bytes, and how many of them the host holds in huge pages
    assert 0 <= int(meta["weight_huge_page_bytes"]) <= int(meta["weight_bytes"]) + (2 << 20)
    info = httpx.get(f"{auto.url}/v1/engine/info", timeout=30).json()
    assert info["dtype"] == meta["dtype"] and info["dtype_reason"] == meta["dtype_reason"]
    assert info["weight_huge_page_bytes"] == meta["weight_huge_page_bytes"]
    # how the scheduler's idle OpenMP threads wait: the short spin it sets, unless set here
    assert meta["omp_wait"] == info["omp_wait"]
    if any(knob in os.environ for knob in omp_wait.OWN_KNOBS):
        assert meta["omp_wait"] == omp_wait.describe(os.environ)
    else:  # ~24 us of spins, counted from the hint's time the scheduler measured
        spin = re.match(r"GOMP_SPINCOUNT=(\d+): idle threads spin ~24 us at ([\d.]+) ns",
                        meta["omp_wait"])
        assert spin, meta["omp_wait"]
        assert 21 <= int(spin[1]) * float(spin[2]) / 1000 <= 27
    answer = httpx.post(f"{auto.url}/v1/completions", timeout=60, json={
        "model": card["id"], "prompt": "hello", "max_tokens": 4, "temperature": 0})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] >= 1
