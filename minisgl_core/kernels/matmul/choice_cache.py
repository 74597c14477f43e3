"""The kernel choice's cache: one JSON file per key (CPU, torch, threads, the native kernels'
sources, shapes, candidates, ...) under the cache directory, holding each role's kernel per
bucket, every timing and the machine's load when it was measured (choice.py decides when to
read, measure and write)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from minisgl_core.kernels.matmul.base import BUCKETS, Kernel

log = logging.getLogger(__name__)
BUSY_LOAD = 0.5  # load average per core above which timings are taken beside other work


def cache_root() -> Path:
    """Where choices are cached: ``<cache dir>/kernels``."""
    from minisgl_core.store.paths import cache_dir

    return cache_dir() / "kernels"


Times = dict[str, dict[str, list[float]]]  # role -> kernel -> seconds per bucket


def read_choice(path: Path, pools: dict[str, list[Kernel]], remeasure_if_busy: bool = False,
                ) -> tuple[dict[str, tuple[Kernel, ...]], Times | None] | None:
    """The cached choice, each name looked up in its role's pool, and the timings it was made
    from (None where the file has none), in one read of the file; None: no usable choice, or one
    measured on a busy machine when ``remeasure_if_busy``."""
    try:
        body = json.loads(path.read_text())
        if remeasure_if_busy and float(body.get("load", 0.0)) > BUSY_LOAD:
            return None  # measured beside other work: measure again now that it is quiet
        names = body["choice"]
        by_name = {r: {k.name: k for k in pool} for r, pool in pools.items()}
        out = {r: tuple(by_name[r][n] for n in names[r]) for r in pools}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if any(len(ks) != len(BUCKETS) or len({k.layout for k in ks}) != 1 for ks in out.values()):
        return None
    return out, body.get("seconds")


def write_choice(path: Path, key: dict[str, object], choice: dict[str, list[str]],
                 times: Times, load: float) -> None:
    """Cache ``choice`` and its timings atomically (a failure is logged, not raised)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        body = {"key": key, "choice": choice, "seconds": times, "load": round(load, 3)}
        tmp.write_text(json.dumps(body, indent=1, sort_keys=True))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new
    except OSError as exc:
        log.warning("could not cache the kernel choice in %s: %s", path, exc)
