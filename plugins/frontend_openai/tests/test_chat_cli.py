"""``minisgl chat`` against a real service (tiny model) and offline, driven through stdin."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psutil
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


class ChatSession:
    """``minisgl chat`` as a user runs it: lines in, and its output read as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "minisgl_core", "chat", *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out, self.err = bytearray(), bytearray()
        self._readers = [threading.Thread(target=self._drain, args=(pipe, buf), daemon=True)
                         for pipe, buf in ((self.proc.stdout, self.out),
                                           (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(pipe: Any, buf: bytearray) -> None:
        while chunk := pipe.read1(4096):
            buf.extend(chunk)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.proc.poll() is None, f"chat exited waiting for {what}: {self.err!r}"
            assert time.monotonic() < deadline, f"no {what} after {timeout:.0f} s: {self.err!r}"
            time.sleep(0.02)

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        """/quit, then the exit code, stdout and stderr."""
        try:
            self.say("/quit")
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        for reader in self._readers:
            reader.join(10)
        return self.proc.returncode, self.out.decode(), self.err.decode()


@pytest.fixture(scope="module")
def paced(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """The synthetic scheduler at 20 tokens/s per request: a 400-token answer takes 20 s."""
    svc = launch_service(tiny, log_dir=tmp_path_factory.mktemp("paced"), args=[
        *ARGS, "--scheduler", "synthetic", "-s", "roles.scheduler.synthetic.tokens_per_s=20"])
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def aborted(m: dict[str, float]) -> float:
    return m['minisgl_requests_finished_total{reason="abort"}']


def assert_stopped_and_freed(service: RunningService, before: dict[str, float],
                             session: ChatSession) -> str:
    """The answer was stopped, the chat went on to exit 0, and the service got one abort."""
    code, _, err = session.finish()
    assert code == 0, err
    assert re.search(r"^\[.*stopped\]$", err, re.M), err
    after = service.wait_metrics(lambda m: aborted(m) > aborted(before)
                                 and m["minisgl_requests_running"] == 0
                                 and m["minisgl_kv_pages_free"] == m["minisgl_kv_pages_total"],
                                 timeout=60, what="the stopped answer aborted, its pages free")
    assert aborted(after) == aborted(before) + 1
    return err


def test_ctrl_c_before_the_first_byte_stops_the_answer(paced: RunningService) -> None:
    before = paced.metrics()
    session = ChatSession("--url", paced.url, "--api-key", KEY, "--max-tokens", "400")
    with paced.paused("scheduler"):  # frozen: no byte of the answer can come before Ctrl-C
        session.say("Tell me a very long story")
        paced.wait_metrics(lambda m: m["minisgl_frontend_requests_inflight"] == 1, timeout=60,
                           what="the question at the frontend")
        session.interrupt()
        session.wait_for("the stopped summary", lambda: b"stopped]" in session.err)
    assert_stopped_and_freed(paced, before, session)


def test_ctrl_c_between_chunks_stops_the_answer(paced: RunningService) -> None:
    before = paced.metrics()
    session = ChatSession("--url", paced.url, "--api-key", KEY, "--max-tokens", "400")
    session.say("Tell me a very long story")
    session.wait_for("two chunks of the answer", lambda: len(session.out) >= 2)
    session.interrupt()
    err = assert_stopped_and_freed(paced, before, session)
    assert "400 tokens" not in err and "length" not in err


def test_ctrl_c_while_the_connection_opens_sends_nothing() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        # fill the accept queue, which is never served: the next connect waits in SYN_SENT
        fillers: list[socket.socket] = []
        for _ in range(8):
            sock = socket.socket()
            sock.settimeout(0.5)
            try:
                sock.connect(("127.0.0.1", port))
            except TimeoutError:
                sock.close()
                break
            fillers.append(sock)
        try:
            session = ChatSession("--url", f"http://127.0.0.1:{port}", "--model", "m")
            session.say("hello")
            pid = session.proc.pid
            session.wait_for("chat connecting", lambda: any(
                c.status == "SYN_SENT" and c.raddr and c.raddr.port == port
                for c in psutil.Process(pid).net_connections("tcp")))
            session.interrupt()
            session.wait_for("the stopped summary", lambda: b"stopped]" in session.err)
            code, out, err = session.finish()
        finally:
            for sock in fillers:
                sock.close()
    assert code == 0, err
    assert re.search(r"^\[>= 0 tokens, stopped\]$", err, re.M), err
