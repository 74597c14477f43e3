"""``minisgl tp-worker``: a tensor-parallel rank > 0, until rank 0 stops."""

from __future__ import annotations

import logging
from typing import Any

from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.tp_rank import local_device, start_rank
from minisgl_core.parent_death import follow_starter
from minisgl_core.service.worker import run_command

log = logging.getLogger(__name__)


def run_worker(model_dir: str, model_class: Any, rank: int, size: int, addr: str, port: int,
               *, device: str = "cpu", num_threads: int | None = None,
               timeout_s: float = 300.0) -> int:
    """``minisgl tp-worker``: be rank ``rank`` until rank 0 stops; the exit code."""
    if rank < 1:
        raise ValueError("tp-worker runs ranks 1..tp-1; rank 0 is `minisgl launch`")
    engine = start_rank(EngineConfig(model=model_dir, device=local_device(device, 0),
                                     num_threads=num_threads),
                        model_class, rank, size, addr, port, timeout_s)
    try:
        engine.follow()
    except RuntimeError as exc:  # rank 0's sockets closed: it died or was killed
        log.error("rank %d: lost rank 0: %s", rank, exc)
        return 1
    engine.close()
    log.info("rank %d: rank 0 stopped the group; exiting", rank)
    return 0


def worker_command(model_dir: str, model_class: Any, rank: int, size: int, addr: str,
                   port: int, **options: Any) -> None:
    """``minisgl tp-worker``'s body: log to stderr, run the rank, exit with its code."""
    follow_starter()  # a follower that tp_local.py started dies with its rank 0
    logging.basicConfig(level="INFO", format=f"%(asctime)s rank{rank} %(levelname)s %(message)s")
    run_command(lambda: run_worker(model_dir, model_class, rank, size, addr, port, **options),
                (ValueError, RuntimeError))
