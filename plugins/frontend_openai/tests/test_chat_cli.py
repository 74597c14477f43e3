"""``minisgl chat`` against a real service (tiny model) and offline, driven through stdin."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from minisgl_core.service.ports import free_port
from minisgl_core.testing.service import RunningService, launch_service

KEY = "sk-chat-test"
ARGS = ["--max-seq-len-override", "512", "--num-pages", "256", "--page-size", "16",
        "--api-key", KEY]
SAMPLING = ["--temperature", "0", "--max-tokens", "12"]
SUMMARY = re.compile(r"^\[(\d+) tokens, TTFT \d+ ms(, [\d.]+ tokens/s)?, (length|stop)\]$")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from minisgl_core.testing.tiny import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama"))


@pytest.fixture(scope="module")
def service(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    svc = launch_service(tiny, args=ARGS, log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def chat(*args: str, stdin: str, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "minisgl_core", "chat", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def answer(service: RunningService, messages: list[dict[str, str]]) -> str:
    r = httpx.post(f"{service.url}/v1/chat/completions", timeout=60,
                   headers={"Authorization": f"Bearer {KEY}"},
                   json={"messages": messages, "temperature": 0, "max_tokens": 12})
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def test_conversation_matches_the_api(service: RunningService) -> None:
    # the key comes from the environment, as for `minisgl launch`
    done = chat("--url", service.url + "/v1", *SAMPLING, env={"MINISGL_API_KEY": KEY},
                stdin="Hello there\nAnd then?\n/reset\nOnce upon a time\n")
    assert done.returncode == 0, done.stderr
    u1, u2, u3 = "Hello there", "And then?", "Once upon a time"
    a1 = answer(service, [{"role": "user", "content": u1}])
    a2 = answer(service, [{"role": "user", "content": u1}, {"role": "assistant", "content": a1},
                          {"role": "user", "content": u2}])  # the second turn carries the first
    a3 = answer(service, [{"role": "user", "content": u3}])  # after /reset: a fresh start
    assert done.stdout == f"{a1}\n{a2}\n{a3}\n"
    summaries = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert summaries[2] == "[a new conversation]" and len(summaries) == 4
    for line in (summaries[0], summaries[1], summaries[3]):
        assert SUMMARY.match(line), line


def test_offline_gives_the_same_answer(service: RunningService, tiny: str) -> None:
    done = chat("--offline", "--model", tiny, *SAMPLING, stdin="Hello there\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == answer(service, [{"role": "user", "content": "Hello there"}]) + "\n"
    assert SUMMARY.match(done.stderr.strip().splitlines()[-1]), done.stderr


def test_refusals_exit_1_with_the_reason(service: RunningService) -> None:
    wrong = chat("--url", service.url, "--api-key", "sk-wrong", stdin="hi\n")
    assert wrong.returncode == 1 and "401: incorrect API key" in wrong.stderr
    gone = chat("--url", f"http://127.0.0.1:{free_port()}", stdin="hi\n")
    assert gone.returncode == 1 and "cannot reach" in gone.stderr
    bad = chat("--url", service.url, "--api-key", KEY, "--model", "no-such-model",
               stdin="hi\nhello\n")
    assert bad.returncode == 1 and bad.stderr.count("does not exist") == 2  # each turn says so
    assert bad.stdout.strip() == ""


def test_ctrl_c_stops_the_answer_and_frees_its_pages(service: RunningService,
                                                     tmp_path: Path) -> None:
    before = service.metrics()
    total = before["minisgl_kv_pages_total"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "minisgl_core", "chat", "--url", service.url, "--api-key", KEY,
         "--max-tokens", "400"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        # frozen, the scheduler cannot end the answer before Ctrl-C
        with service.paused("scheduler"):
            assert proc.stdin is not None
            proc.stdin.write("Tell me a very long story\n")
            proc.stdin.flush()
            m = service.wait_metrics(lambda m: m["minisgl_frontend_requests_inflight"] == 1,
                                     timeout=30)
            assert m["minisgl_frontend_requests_inflight"] == 1
            proc.send_signal(signal.SIGINT)
            after = service.wait_metrics(
                lambda m: m['minisgl_requests_finished_total{reason="abort"}']
                > before['minisgl_requests_finished_total{reason="abort"}'], timeout=30)
        out, err = proc.communicate("/quit\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    assert "stopped]" in err
    assert after['minisgl_requests_finished_total{reason="abort"}'] \
        == before['minisgl_requests_finished_total{reason="abort"}'] + 1
    back = service.wait_metrics(lambda m: m["minisgl_kv_pages_free"] == total
                                and m["minisgl_requests_running"] == 0, timeout=20)
    assert back["minisgl_kv_pages_free"] == total and back["minisgl_requests_running"] == 0
