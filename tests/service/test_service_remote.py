"""A scheduler that joins from "another host": `minisgl worker` in its own process group, over
tcp + keys on 127.0.0.1; it serves, stops with the service, and its death ends or pauses it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from minisgl_core.testing.remote import WAIT_S, health, remote_service, start_worker, wait_for
from minisgl_core.testing.service import RunningService, worker_pids

from .conftest import SERVICE_ARGS

SYNTHETIC = [*SERVICE_ARGS, "--scheduler", "synthetic"]


def _chat(svc: RunningService, max_tokens: int = 8) -> httpx.Response:
    return httpx.post(f"{svc.url}/v1/chat/completions", timeout=120, json={
        "model": svc.model_name(), "max_tokens": max_tokens, "ignore_eos": True,
        "messages": [{"role": "user", "content": "hello"}]})


@pytest.mark.parametrize("transport", ["zmq", "nng"])
def test_remote_scheduler_serves_and_stops_with_the_service(tiny_model: str, tcp_keys: Path,
                                                            tmp_path: Path, transport: str) -> None:
    with remote_service(tiny_model, tcp_keys, tmp_path, SERVICE_ARGS, transport=transport) as r:
        # the launcher started only the tokenizer and detokenizer; the scheduler is elsewhere
        assert sorted(r.svc.workers()) == ["detokenizer", "scheduler", "tokenizer"]
        assert r.svc.workers()["scheduler"].pid == r.worker.pid
        assert r.worker.pid not in worker_pids(r.svc.proc.pid)
        answer = _chat(r.svc)
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 8
        assert answer.json()["choices"][0]["message"]["content"]
        assert "remote scheduler joined" in r.svc.log()
        assert r.svc.stop() == 0
        # Shutdown reaches the remote scheduler through the relay: it leaves cleanly
        assert r.worker.wait(WAIT_S) == 0, r.log()


def test_killing_the_remote_scheduler_fails_streams_and_ends_the_service(
        tiny_model: str, tcp_keys: Path, tmp_path: Path) -> None:
    slow = ["-s", "roles.scheduler.synthetic.tokens_per_s=20", *SYNTHETIC]
    with remote_service(tiny_model, tcp_keys, tmp_path, slow) as r:
        body = {"model": r.svc.model_name(), "max_tokens": 400, "stream": True,
                "ignore_eos": True, "messages": [{"role": "user", "content": "hello"}]}
        with httpx.stream("POST", f"{r.svc.url}/v1/chat/completions", json=body,
                          timeout=WAIT_S) as resp:
            lines = resp.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            os.killpg(r.worker.pid, signal.SIGKILL)
            rest = [json.loads(line[6:]) for line in lines
                    if line.startswith("data: ") and line != "data: [DONE]"]
        assert any("error" in chunk for chunk in rest), rest[-3:]
        assert r.svc.proc.wait(WAIT_S) == 1
        assert "remote scheduler" in r.svc.log() and "no heartbeat" in r.svc.log()


def test_remote_wait_answers_503_until_a_scheduler_joins_again(tiny_model: str, tcp_keys: Path,
                                                               tmp_path: Path) -> None:
    with remote_service(tiny_model, tcp_keys, tmp_path,
                        [*SYNTHETIC, "--remote-wait", str(WAIT_S)]) as r:
        os.killpg(r.worker.pid, signal.SIGKILL)
        r.worker.wait(30)
        wait_for("/health 503 after the remote scheduler died", lambda: health(r.svc) == 503,
              r.svc.log)
        assert _chat(r.svc).status_code == 503
        assert r.svc.proc.poll() is None  # the service waits
        second = start_worker(r.address, tcp_keys, r.worker_log)
        r.worker = second
        try:
            wait_for("/health 200 with the second scheduler", lambda: health(r.svc) == 200,
                  lambda: r.svc.log() + r.log())
            assert _chat(r.svc).status_code == 200
            assert "joined again" in r.svc.log()
        finally:
            assert r.svc.stop() == 0
            assert second.wait(WAIT_S) == 0, r.log()


def test_a_worker_with_other_keys_is_refused_and_gives_up(tiny_model: str, tcp_keys: Path,
                                                          tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "minisgl_core", "keys", "new", str(other)],
                   check=True, capture_output=True, timeout=300)
    with remote_service(tiny_model, tcp_keys, tmp_path, SYNTHETIC) as r:
        intruder_log = tmp_path / "intruder.log"
        intruder = start_worker(r.address, other, intruder_log, "--timeout", "3")
        try:
            assert intruder.wait(WAIT_S) == 1
        finally:
            if intruder.poll() is None:
                os.killpg(intruder.pid, signal.SIGKILL)
        assert "no assignment from" in intruder_log.read_text()
        wait_for("the refusal in the launcher's log", lambda: "refused a peer" in r.svc.log(),
              r.svc.log)
        assert _chat(r.svc).status_code == 200
        assert psutil.pid_exists(r.worker.pid)


@pytest.mark.model
def test_the_default_model_answers_from_a_remote_scheduler(tcp_keys: Path,
                                                           tmp_path: Path) -> None:
    from minisgl_core.plugin.model_lookup import resolve

    # one scheduler thread: two OpenMP threads crawl when other processes hold the cores
    with remote_service(resolve(None).path, tcp_keys, tmp_path, ("-s", "num_threads=1")) as r:
        answer = httpx.post(f"{r.svc.url}/v1/chat/completions", timeout=300, json={
            "model": r.svc.model_name(), "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user",
                          "content": "The capital of France is? Answer in one word."}]})
        assert "Paris" in answer.json()["choices"][0]["message"]["content"], answer.text


def test_a_frozen_worker_is_taken_for_gone_and_then_leaves_too(tiny_model: str, tcp_keys: Path,
                                                               tmp_path: Path) -> None:
    """SIGSTOP stands in for a network that drops: no beats reach the launcher, which stops;
    the worker, resumed, hears no hello and exits rather than stay behind."""
    with remote_service(tiny_model, tcp_keys, tmp_path, SYNTHETIC) as r:
        worker = psutil.Process(r.worker.pid)
        worker.suspend()
        try:
            assert r.svc.proc.wait(WAIT_S) == 1
        finally:
            worker.resume()
        assert r.worker.wait(WAIT_S) == 1
        assert "lost the launcher" in r.log()


def test_killing_the_launcher_ends_the_remote_worker(tiny_model: str, tcp_keys: Path,
                                                     tmp_path: Path) -> None:
    with remote_service(tiny_model, tcp_keys, tmp_path, SYNTHETIC) as r:
        os.killpg(r.svc.proc.pid, signal.SIGKILL)  # the launcher and its own workers
        r.svc.proc.wait(30)
        assert r.worker.wait(WAIT_S) == 1
        assert "lost the launcher" in r.log()


def test_a_worker_for_an_unknown_role_is_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "minisgl_core", "worker", "--role", "frontend", "--connect",
         "tcp://127.0.0.1:1"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "minisgl: error: --role 'frontend': one of tokenizer, scheduler, detokenizer"]


@pytest.mark.parametrize("transport", ["zmq", "nng"])
def test_closing_a_remote_role_stops_its_receivers_first(tmp_path: Path, transport: str) -> None:
    # nng frees a socket that a timed receive still waits on, and that timeout's expiry then
    # aborts the launcher: the service closes each worker (here the relay and heartbeat
    # threads, in their receives) before it closes the transport
    import threading
    import time

    from minisgl_core.config.launch import LaunchConfig
    from minisgl_core.service.remote import RECV_WAIT_S, RemoteRole
    from minisgl_core.service.spec import Endpoints
    from minisgl_core.testing.transports import make_transport

    t = make_transport(transport)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    eps = Endpoints(**{c: t.endpoint(run_dir, c)
                       for c in ("tokenizer", "scheduler", "detokenizer", "control")},
                    frontends={})
    try:
        role = RemoteRole(t, run_dir, eps, "scheduler", LaunchConfig(transport=transport), 256)
        threads = [th for th in threading.enumerate() if th.name.startswith("remote-scheduler")]
        assert len(threads) == 3 and all(th.is_alive() for th in threads)
        time.sleep(2 * RECV_WAIT_S)  # the receivers wait in their timed receives
        role.worker.close()
        assert not any(th.is_alive() for th in threads)
    finally:
        t.close()
