"""Child processes that die with the process that started them (Linux's parent-death signal).

The child sets the signal itself, at its start: ``subprocess.Popen(preexec_fn=...)`` would run
Python between fork and exec, which can deadlock or abort once the parent has other threads
(gRPC's, torch's)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Mapping

PARENT_PID_ENV = "MINISGL_PARENT_PID"


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies (elsewhere: nothing)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) asking a child started with it to die with this
    process: the child calls ``follow_starter`` at its start."""
    return {**(os.environ if env is None else env), PARENT_PID_ENV: str(os.getpid())}


def follow_starter() -> None:
    """Die with the process that started this one with ``child_env``, and exit at once if it is
    already gone (it died before the signal was set); nothing when not started that way."""
    starter = os.environ.pop(PARENT_PID_ENV, None)  # not inherited by this process's children
    if starter is None:
        return
    die_with_parent()
    if sys.platform.startswith("linux") and os.getppid() != int(starter):
        os._exit(1)


__all__ = ["PARENT_PID_ENV", "child_env", "die_with_parent", "follow_starter"]
