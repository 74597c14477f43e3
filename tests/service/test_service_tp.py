"""`--tp 2` through the OpenAI frontend: the same greedy tokens as `--tp 1` (and `--dp 2 --tp 2`),
a rank started separately with `minisgl tp-worker` (the multi-host path, on 127.0.0.1), clear
failures. In fp32, where equal tokens are the promise (docs/tensor-parallel.md); bf16's promise is
checked in tests/engine/test_engine_tp.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from minisgl_core.testing.service import RunningService, free_port, launch_service

ARGS = ["--max-seq-len-override", "512", "--num-pages", "128", "--page-size", "16",
        "--dtype", "float32"]
PROMPTS = ["The quick brown fox", "Hello world! This is", "你好，世界", "def add(a, b):"]


@pytest.fixture(scope="module")
def qwen2_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny Qwen2 (q/k/v biases, varied greedy tokens), 2 KV heads: one per rank at tp 2."""
    from minisgl_core.testing.tiny import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-qwen2", "qwen2"))


def answers(svc: RunningService) -> list[tuple[str, list[int], list[str]]]:
    """Greedy text and token ids of every prompt (one batch), and one streamed chat's chunks."""
    client = OpenAI(base_url=f"{svc.url}/v1", api_key="none")
    model = svc.model_name()
    comp = client.completions.create(model=model, prompt=PROMPTS, max_tokens=24, temperature=0,
                                     extra_body={"ignore_eos": True, "return_token_ids": True})
    out = [(c.text, list(c.model_extra["token_ids"]), [])  # type: ignore[index]
           for c in sorted(comp.choices, key=lambda c: c.index)]
    assert all(len(ids) == 24 for _, ids, _ in out)
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Once upon a time"}], max_tokens=16,
        temperature=0, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "return_token_ids": True})
    chunks, ids = [], []
    for c in stream:
        for choice in c.choices:
            chunks.append(choice.delta.content or "")
            ids += (choice.model_extra or {}).get("token_ids", [])
    assert len(ids) == 16
    out.append(("".join(chunks), ids, chunks))
    return out


@pytest.fixture(scope="module")
def reference(qwen2_model: str, tmp_path_factory: pytest.TempPathFactory) -> list[object]:
    svc = launch_service(qwen2_model, args=ARGS, log_dir=tmp_path_factory.mktemp("tp1"))
    try:
        return list(answers(svc))
    finally:
        svc.stop()


def test_tp2_equals_tp1_and_a_dead_rank_stops_the_service(
        qwen2_model: str, reference: list[object], tmp_path: Path) -> None:
    import psutil

    svc = launch_service(qwen2_model, args=[*ARGS, "--tp", "2"], log_dir=tmp_path)
    try:
        titles = {" ".join(psutil.Process(p).cmdline()).strip(): p for p in svc.worker_pids}
        assert sorted(titles) == ["minisgl::detokenizer", "minisgl::scheduler",
                                  "minisgl::scheduler-rank1", "minisgl::tokenizer"]
        assert answers(svc) == reference
        assert len({text for text, _, _ in reference}) == len(reference)  # not one degenerate
        psutil.Process(titles["minisgl::scheduler-rank1"]).kill()
        assert svc.proc.wait(30) == 1
        assert "minisgl::scheduler-rank1" in svc.log()
    finally:
        svc.stop()
        assert not svc.leftover_workers(), svc.log()[-2000:]


def test_dp2_tp2_equals_dp1_tp1(qwen2_model: str, reference: list[object],
                               tmp_path: Path) -> None:
    """Two replicas of two ranks each: the same greedy tokens as one engine, both replicas
    used."""
    import psutil

    from minisgl_core.testing.service import parse_metrics

    svc = launch_service(qwen2_model, args=[*ARGS, "--dp", "2", "--tp", "2"], log_dir=tmp_path)
    try:
        titles = sorted(" ".join(psutil.Process(p).cmdline()).strip() for p in svc.worker_pids)
        assert titles == ["minisgl::detokenizer", "minisgl::scheduler-dp0",
                          "minisgl::scheduler-dp0-rank1", "minisgl::scheduler-dp1",
                          "minisgl::scheduler-dp1-rank1", "minisgl::tokenizer"]
        assert answers(svc) == reference
        m = parse_metrics(httpx.get(f"{svc.url}/metrics", timeout=30).text)
        received = [m[f'minisgl_scheduler_requests_received_total{{dp_rank="{i}"}}']
                    for i in range(2)]
        assert all(n > 0 for n in received), received
    finally:
        assert svc.stop() == 0
        assert not svc.leftover_workers(), svc.log()[-2000:]


def test_rank_started_separately_with_tp_worker(qwen2_model: str, reference: list[object],
                                                tmp_path: Path) -> None:
    port = free_port()
    worker_log = tmp_path / "tp-worker.log"
    with open(worker_log, "wb") as log:  # "host B": started first, it waits for rank 0
        worker = subprocess.Popen(
            [sys.executable, "-m", "minisgl_core", "tp-worker", "--model", qwen2_model,
             "--tp", "2", "--rank", "1", "--dist-addr", "127.0.0.1", "--dist-port", str(port),
             "--num-threads", "1"], stdout=log, stderr=subprocess.STDOUT)
    try:  # "host A": rank 0 only, plus the tokenizer, detokenizer and frontend
        svc = launch_service(qwen2_model, log_dir=tmp_path, args=[
            *ARGS, "--tp", "2", "--tp-local-ranks", "0", "--dist-addr", "127.0.0.1",
            "--dist-port", str(port)])
        try:
            assert answers(svc) == reference
        finally:
            assert svc.stop() == 0
        assert worker.wait(20) == 0, worker_log.read_text()
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
            worker.wait()


@pytest.mark.parametrize(("args", "message"), [
    (["--tp", "3"], "more than this model's 2 KV heads"),
    (["--tp", "2", "--transport", "inproc"], "needs a multi-process transport"),
    (["--tp", "2", "--tp-local-ranks", "0"], "dist_port must be set"),
])
def test_bad_tp_fails_the_launch_clearly(qwen2_model: str, tmp_path: Path, args: list[str],
                                         message: str) -> None:
    # "launch exited with": it ended by itself, before launch_service's own wait ran out
    with pytest.raises(RuntimeError, match="launch exited with") as info:
        launch_service(qwen2_model, args=[*ARGS, *args], log_dir=tmp_path, timeout=240)
    assert message in str(info.value)
    if args == ["--tp", "3"]:  # a rank said why, naming itself
        assert "minisgl::scheduler" in str(info.value) and "failed" in str(info.value)
