"""The compiled decode step as the service's default: the first start serves eagerly while a
child process compiles the graphs, then serves them once idle, with the same greedy text; the
next start loads them before it is ready."""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil

from minisgl_core.engine.compile_choice import AUTO_ON
from minisgl_core.testing.service import RunningService, launch_service
from minisgl_core.testing.tiny import make_tiny_model

ARGS = ["--dtype", "float32", "--num-pages", "64", "--max-seq-len-override", "256",
        "-s", "num_threads=1"]
COMPILED = "minisgl_decode_step_compiled"


def _greedy(svc: RunningService) -> list[int]:
    r = httpx.post(f"{svc.url}/v1/completions", timeout=120, json={
        "model": svc.model_name(), "prompt": "hello there", "max_tokens": 12,
        "temperature": 0, "ignore_eos": True, "return_token_ids": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def test_the_default_compiles_aside_then_serves_the_graphs_and_loads_them_at_the_next_start(
        tmp_path: Path) -> None:
    model = make_tiny_model(tmp_path / "tiny-llama", "llama")
    # the service's default (the suite's own is eager), with an inductor cache of its own: cold
    env = {"MINISGL_COMPILE": "auto", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    svc = launch_service(str(model), args=ARGS, env=env, log_dir=tmp_path)
    try:
        (meta,) = [m["meta"] for m in httpx.get(f"{svc.url}/v1/models").json()["data"]]
        assert (meta["compile"], meta["compile_reason"]) == ("on", AUTO_ON)
        eager = _greedy(svc)  # served while the child compiles
        children = [p for p in psutil.Process(svc.proc.pid).children(recursive=True)
                    if "minisgl_core.engine.compile_worker" in " ".join(p.cmdline())]
        assert children and all(p.nice() == 19 for p in children)
        svc.wait_metrics(lambda m: m[COMPILED] == 1, timeout=600,
                         what="the compiled decode step to serve")
        assert _greedy(svc) == eager
        log = svc.log()
        assert "compiling the decode step in a child process" in log
        assert "loading the compiled decode step from inductor's cache while idle" in log
    finally:
        svc.stop()
    again = launch_service(str(model), args=ARGS, env=env, log_dir=tmp_path)
    try:
        again.wait_metrics(lambda m: m[COMPILED] == 1, timeout=10)  # loaded before ready:
        assert "from inductor's cache before serving" in again.log()
        assert _greedy(again) == eager
    finally:
        again.stop()
