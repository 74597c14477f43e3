"""A running service: its workers (processes, or threads for single-process transports), the
clients its frontends use, and how it stops."""

from __future__ import annotations

import logging
import multiprocessing as mp
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minisgl_core.service.spec import Endpoints
from minisgl_core.wire import codec
from minisgl_core.wire.schema import Shutdown

if TYPE_CHECKING:
    from minisgl_core.config.launch import LaunchConfig
    from minisgl_core.interfaces import Transport

log = logging.getLogger("minisgl")

STOP_GRACE_S = 3.0


@dataclass
class Worker:
    """A running worker: a process, or a thread for single-process transports."""

    role: str
    handle: Any  # multiprocessing.Process | threading.Thread
    name: str = ""  # the role, or e.g. "scheduler-rank1" for a tensor-parallel follower

    def __post_init__(self) -> None:
        self.name = self.name or self.role

    def alive(self) -> bool:
        return self.handle.is_alive()

    def close(self) -> None:
        """Release what the launcher runs for this worker before the transport closes
        (nothing for a process or a thread; a remote worker's relay threads)."""

    def describe_exit(self) -> str:
        code = getattr(self.handle, "exitcode", None)
        pid = getattr(self.handle, "pid", None)
        how = f"exit code {code}" if code is None or code >= 0 else f"signal {-code}"
        return f"minisgl::{self.name} (pid {pid}) died ({how})" if pid else f"{self.name} died"


@dataclass
class Service:
    """A started engine (workers up and ready) and the clients frontends use to reach it."""

    config: LaunchConfig
    transport: Transport
    run_dir: Path
    endpoints: Endpoints
    workers: list[Worker]
    clients: dict[str, Any]
    control: Any
    ready_info: dict[str, str] = field(default_factory=dict)
    plugin_modules: tuple[str, ...] = ()

    def send_shutdown(self) -> None:
        """Ask every live worker to leave its loop (bounded: a push to a dead peer would block)."""
        ep = self.endpoints
        inbox = {"tokenizer": ep.tokenizer, "scheduler": ep.scheduler,
                 "detokenizer": ep.detokenizer}
        inbox.update({f"scheduler-dp{i}": addr for i, addr in enumerate(ep.schedulers)})
        # tensor-parallel followers have no inbox: rank 0 stops them when it leaves its loop
        targets = [inbox[w.name] for w in self.workers if w.alive() and w.name in inbox]

        def send_all() -> None:
            for addr in targets:
                try:
                    # left open: closing with linger 0 would drop the message before it leaves
                    self.transport.push(addr).send(codec.encode(Shutdown()))
                except Exception:  # noqa: BLE001 - the worker may be gone by now
                    pass

        sender_thread = threading.Thread(target=send_all, name="shutdown", daemon=True)
        sender_thread.start()
        sender_thread.join(1.0)

    def stop(self) -> None:
        """Stop every worker (Shutdown, then SIGTERM, then SIGKILL) and remove the run dir."""
        self.send_shutdown()
        deadline = time.monotonic() + STOP_GRACE_S
        for w in self.workers:
            w.handle.join(max(0.0, deadline - time.monotonic()))
        for w in self.workers:
            if isinstance(w.handle, mp.process.BaseProcess) and w.handle.is_alive():
                w.handle.terminate()
                w.handle.join(1.0)
                if w.handle.is_alive():
                    w.handle.kill()
                    w.handle.join(1.0)
        self.control.close()
        for w in self.workers:
            w.close()
        self.transport.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        log.info("all workers stopped")
