"""Children that die with the process that started them (minisgl_core/parent_death.py), set in
the child at its start, not between fork and exec."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minisgl_core.parent_death import PARENT_PID_ENV, child_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the parent-death signal is Linux's")

CHILD = ("import time; from minisgl_core.parent_death import follow_starter; follow_starter(); "
         "print('started', flush=True); time.sleep(60)")
# the middle process starts CHILD with child_env, says its pid, then waits to be killed
MIDDLE = ("import subprocess, sys, time; from minisgl_core.parent_death import child_env; "
          f"p = subprocess.Popen([sys.executable, '-c', {CHILD!r}], env=child_env(), "
          "stdout=subprocess.PIPE, text=True); print(p.pid, p.stdout.readline().strip(), "
          "flush=True); time.sleep(60)")


def _alive(pid: int) -> bool:
    """Running and not a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_child_dies_when_its_starter_is_killed() -> None:
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE], stdout=subprocess.PIPE, text=True)
    try:
        assert middle.stdout is not None
        pid_text, said = middle.stdout.readline().split()
        child = int(pid_text)
        assert said == "started" and _alive(child)
    finally:
        middle.send_signal(signal.SIGKILL)
        middle.wait(10)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived the process that started it")


def test_child_whose_starter_is_already_gone_exits_at_once() -> None:
    env = {**os.environ, PARENT_PID_ENV: "1"}  # never this child's parent: that is this test
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1 and "started" not in done.stdout


def test_child_started_otherwise_is_left_alone() -> None:
    env = {k: v for k, v in os.environ.items() if k != PARENT_PID_ENV}
    code = CHILD.replace("time.sleep(60)", "import os; print(os.environ.get("
                         f"{PARENT_PID_ENV!r}), flush=True)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.split() == ["started", "None"]


def test_child_env_names_this_process_and_keeps_the_rest() -> None:
    env = child_env({"A": "1"})
    assert env == {"A": "1", PARENT_PID_ENV: str(os.getpid())}
