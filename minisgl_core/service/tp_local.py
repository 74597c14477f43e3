"""Tensor parallelism inside one program: rank 0 in this process, ranks 1..N-1 as
``minisgl tp-worker`` subprocesses on this host. ``LLM(model, tp=N)`` uses it."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
import threading
import weakref
from typing import Any

from minisgl_core.engine.config import EngineConfig, threads_per_rank
from minisgl_core.engine.engine import Engine
from minisgl_core.parent_death import child_env
from minisgl_core.service.ports import free_port

log = logging.getLogger(__name__)

ADDR = "127.0.0.1"  # every rank is on this host: the group never listens beyond loopback


class LocalGroup:
    """Rank 0's Engine and the follower processes; ``close()`` stops them all (idempotent)."""

    def __init__(self, config: EngineConfig, model_class: Any, size: int,
                 timeout_s: float = 300.0, plugin_modules: tuple[str, ...] = ()) -> None:
        """``plugin_modules`` reach the followers as ``MINISGL_PLUGINS``, so that they resolve
        the model with the same plugins as this process."""
        from minisgl_core.engine.tp_rank import local_device

        if size < 2:
            raise ValueError(f"a tensor-parallel group needs 2 ranks or more, got {size}")
        port = free_port(ADDR)
        threads = threads_per_rank(config.num_threads, size)  # the ranks share this host's cores
        self.followers = [_start_follower(config, rank, size, port, threads, timeout_s,
                                          plugin_modules) for rank in range(1, size)]
        # close() also runs at exit or collection: a follower never outlives this group
        self._finalizer = weakref.finalize(self, _stop, None, self.followers)
        try:
            self.engine = self._start_rank0(
                dataclasses.replace(config, device=local_device(config.device, 0),
                                    num_threads=threads), model_class, size, port, timeout_s)
        except BaseException:
            self._finalizer()
            raise
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _stop, self.engine, self.followers)

    def _start_rank0(self, config: EngineConfig, model_class: Any, size: int, port: int,
                     timeout_s: float) -> Engine:
        """start_rank for rank 0, in a thread so that a follower's early exit fails fast instead
        of leaving rank 0 waiting ``timeout_s`` for a rank that will never join."""
        from minisgl_core.engine.tp_rank import start_rank

        box: dict[str, Any] = {}

        def join() -> None:
            try:
                box["engine"] = start_rank(config, model_class, 0, size, ADDR, port, timeout_s)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=join, name="tp-rank0-join", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
            for rank, proc in enumerate(self.followers, 1):
                if thread.is_alive() and proc.poll() is not None:
                    raise RuntimeError(f"tensor-parallel rank {rank} exited with code "
                                       f"{proc.returncode} before the group formed")
        if "error" in box:
            raise box["error"]
        return box["engine"]  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the followers and leave the process group."""
        self._finalizer()


def _start_follower(config: EngineConfig, rank: int, size: int, port: int, threads: int,
                    timeout_s: float, plugin_modules: tuple[str, ...]) -> subprocess.Popen[bytes]:
    from minisgl_core.engine.tp_rank import local_device

    cmd = [sys.executable, "-m", "minisgl_core", "tp-worker", "--rank", str(rank),
           "--tp", str(size), "--dist-addr", ADDR, "--dist-port", str(port),
           "--model", config.model, "--device", local_device(config.device, rank),
           "--timeout", str(timeout_s), "--num-threads", str(threads)]

    env = child_env()
    extra = [m for m in env.get("MINISGL_PLUGINS", "").split(",") if m.strip()]
    env["MINISGL_PLUGINS"] = ",".join(dict.fromkeys([*extra, *plugin_modules]))
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)


def _stop(engine: Engine | None, followers: list[subprocess.Popen[bytes]]) -> None:
    if engine is not None:
        engine.close()  # tells the followers to stop, then leaves the group
    for proc in followers:
        try:
            proc.wait(30 if engine is not None else 0.1)
        except subprocess.TimeoutExpired:
            if engine is not None:
                log.warning("tensor-parallel rank pid %d did not stop: killing it", proc.pid)
            proc.kill()
            proc.wait()
