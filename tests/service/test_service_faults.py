"""Faults through real processes: a worker killed mid-stream, a bad model, a clean SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from minisgl_core.testing.service import launch_service

ARGS = ["--max-seq-len-override", "512", "--num-pages", "128"]


# The synthetic scheduler at 20 tokens/s per request: a 400-token answer takes 20 s, so it is
# still streaming when its scheduler is killed, however fast or loaded the host.
PACED = ["--scheduler", "synthetic", "-s", "roles.scheduler.synthetic.tokens_per_s=20"]


@pytest.mark.parametrize("transport", ["zmq", "nng"])
def test_scheduler_killed_mid_stream(tiny_model: str, tmp_path: Path, transport: str) -> None:
    svc = launch_service(tiny_model, transport=transport, args=[*ARGS, *PACED], log_dir=tmp_path)
    try:
        scheduler = svc.workers()["scheduler"]
        body = {"model": svc.model_name(), "max_tokens": 400, "stream": True, "ignore_eos": True,
                "messages": [{"role": "user", "content": "go"}]}
        lines: list[str] = []
        with httpx.stream("POST", f"{svc.url}/v1/chat/completions", json=body,
                          timeout=60) as resp:
            for line in resp.iter_lines():
                lines.append(line)
                if len(lines) == 6:  # a few tokens in
                    scheduler.kill()
        assert any(line.startswith("data: {\"error\"") for line in lines), lines[-4:]
        assert lines[-2:] == ["data: [DONE]", ""] or lines[-1] == "data: [DONE]"
        svc.assert_ended_after_death("scheduler")
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
    # it exits on its own (a launch that waited for a worker that never comes would hang)
    proc = subprocess.run([sys.executable, "-m", "minisgl_core", "launch", "--model", str(bad),
                           "--port", "0"], capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
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
