"""Faults through real processes: a worker killed mid-stream, a bad model, a clean SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from minisgl_core.testing.service import RunningService, launch_service

ARGS = ["--max-seq-len-override", "512", "--num-pages", "128"]


def _kill_mid_stream(svc: RunningService, scheduler: psutil.Process,
                     body: dict[str, object]) -> tuple[list[str], float | None]:
    """Stream one request; after 6 lines freeze the scheduler and, if the request is still
    unfinished at the launcher, SIGKILL it. The lines, and when it was killed (None: the tiny
    model had already finished, so the scheduler was let go and the stream drained)."""
    lines: list[str] = []
    killed_at = None
    with httpx.stream("POST", f"{svc.url}/v1/chat/completions", json=body, timeout=20) as resp:
        for line in resp.iter_lines():
            lines.append(line)
            if len(lines) == 6:
                scheduler.suspend()  # frozen, it cannot finish the request while we look
                time.sleep(0.3)  # what it sent before the freeze reaches the launcher
                if svc.metrics()["minisgl_frontend_requests_inflight"] == 1:
                    scheduler.kill()
                    killed_at = time.monotonic()
                else:
                    scheduler.resume()
    return lines, killed_at


@pytest.mark.parametrize("transport", ["zmq", "nng"])
def test_scheduler_killed_mid_stream(tiny_model: str, tmp_path: Path, transport: str) -> None:
    svc = launch_service(tiny_model, transport=transport, args=ARGS, log_dir=tmp_path)
    try:
        scheduler = svc.workers()["scheduler"]
        body = {"model": svc.model_name(), "max_tokens": 400, "stream": True, "ignore_eos": True,
                "messages": [{"role": "user", "content": "go"}]}
        for _ in range(5):  # bounded: one 400-token request per try
            lines, killed_at = _kill_mid_stream(svc, scheduler, body)
            if killed_at is not None:
                break
        else:
            pytest.fail("every request had finished before the scheduler was frozen")
        assert any(line.startswith("data: {\"error\"") for line in lines), lines[-4:]
        assert lines[-2:] == ["data: [DONE]", ""] or lines[-1] == "data: [DONE]"
        svc.proc.wait(10)
        assert time.monotonic() - killed_at < 5
        assert svc.proc.returncode != 0
        assert "scheduler" in svc.log()
        assert not svc.leftover_workers()
    finally:
        svc.stop(signal.SIGKILL)


def test_sigterm_stops_everything_cleanly(tiny_model: str, tmp_path: Path) -> None:
    svc = launch_service(tiny_model, transport="zmq", args=ARGS, log_dir=tmp_path)
    assert len(svc.worker_pids) == 3
    assert svc.stop(signal.SIGTERM) == 0, svc.log()[-2000:]
    assert not svc.leftover_workers()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{svc.url}/health", timeout=1)


def test_bad_model_path_fails_fast(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "minisgl_core", "launch", "--model", str(bad),
                           "--port", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60
    assert "minisgl::" in proc.stderr or "failed" in proc.stderr, proc.stderr[-2000:]


def test_inproc_runs_the_whole_stack_in_one_process(tiny_model: str, tmp_path: Path) -> None:
    svc = launch_service(tiny_model, transport="inproc", args=ARGS, log_dir=tmp_path)
    try:
        assert svc.worker_pids == []  # the roles are threads of the launcher
        r = httpx.post(f"{svc.url}/v1/completions", timeout=30, json={
            "model": svc.model_name(), "prompt": "hi", "max_tokens": 6, "ignore_eos": True})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 6
    finally:
        assert svc.stop() == 0
