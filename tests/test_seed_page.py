"""The seed's page runs unchanged: its stage-3 milestone script, read out of ../shared/SEED.md at
run time, starts `python -m minisgl --model models/Qwen3-0.6B ...` and prints its five lines."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / ".." / "shared" / "SEED.md"
SCRIPT_HEADER = b"\nexamples/stage3_milestone.py\n"  # the line naming the script on the page
SCRIPT_END = b"\nWhat it prints\n"  # the page's next heading
RUN_TIMEOUT_S = 180.0

EXPECTED = [
    r"service ready \(\d+ s\): 1 API server process \+ \d+ worker processes \(scheduler, "
    r"tokenizer\), passing messages over ZMQ",
    r"non-streaming: (?:'.+'|\".+\")",
    r"streaming: [1-9]\d* chunks, the first after \d+ ms, all of them after \d+ ms",
    r"8 concurrent requests x 16 tokens: \d+\.\d\d s in total \(\d+\.\d tokens/s\), each request "
    r"\d+\.\d\d-\d+\.\d\d s; they share one batch, nobody queues",
    re.escape("Try it yourself: curl http://127.0.0.1:PORT/v1/chat/completions -H "
              "'Content-Type: application/json' -d '{\"model\":\"qwen3\",\"messages\":"
              "[{\"role\":\"user\",\"content\":\"hi\"}]}'"),
]


def seed_script() -> bytes:
    """The milestone script exactly as the page prints it (its last line's newline included)."""
    if not SEED.is_file():
        pytest.skip(f"the seed's page is not here ({SEED.resolve()}): nothing to run")
    page = SEED.read_bytes()
    _, header, rest = page.partition(SCRIPT_HEADER)
    script, end, _ = rest.partition(SCRIPT_END)
    if not header or not end:
        pytest.fail(f"{SEED} no longer holds examples/stage3_milestone.py followed by "
                    "'What it prints'")
    return script + b"\n"


def tiny_qwen3(path: Path) -> Path:
    """A tiny random Qwen3 whose greedy answers are text: its special tokens (skipped when
    decoding, and two of them end a generation) get zero embeddings, so with the tied LM head
    their logit is 0 against a positive maximum, and the script's streamed answer (whose first
    chunk's time it prints) is never empty."""
    from safetensors.torch import load_file, save_file

    from minisgl_core.testing.tiny import SPECIAL_TOKENS, make_tiny_model

    make_tiny_model(path, arch="qwen3")
    weights = load_file(str(path / "model.safetensors"))
    weights["model.embed_tokens.weight"][: len(SPECIAL_TOKENS)] = 0.0  # [vocab, hidden] rows
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def stop_script(proc: subprocess.Popen[str]) -> None:
    """End a script that overran: Ctrl-C runs its `finally` (which kills the service's process
    group); whatever it had started and is still alive after that is killed here."""
    try:
        started = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)
    for child in started:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def test_the_seed_pages_milestone_script_runs_unchanged(tmp_path: Path) -> None:
    script = seed_script()
    (tmp_path / "stage3_milestone.py").write_bytes(script)
    tiny_qwen3(tmp_path / "models" / "Qwen3-0.6B")
    env = {k: v for k, v in os.environ.items()  # the suite's eager default stays
           if k == "MINISGL_COMPILE" or not k.startswith("MINISGL_")}
    # the service's ipc directory: the script SIGKILLs the service, so it is left behind; a
    # short path of our own (ipc paths are limited to 107 bytes) that goes with the test
    with tempfile.TemporaryDirectory(prefix="seed") as run_base:
        env["TMPDIR"] = run_base
        # sys.executable: `python -m minisgl` in the script resolves to this checkout
        proc = subprocess.Popen([sys.executable, "stage3_milestone.py"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_script(proc)
            pytest.fail(f"the seed's script did not finish within {RUN_TIMEOUT_S:.0f} s")
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    lines = out.splitlines()
    assert len(lines) == len(EXPECTED), out
    for line, pattern in zip(lines, EXPECTED, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)
