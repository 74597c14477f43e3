"""How long this CPU's spin-wait hint (PAUSE) takes, read from csrc/standalone/pause.c: a library
of its own, built without OpenMP, so that a process can ask before torch loads libgomp."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
from pathlib import Path

from minisgl_core.kernels.native import library

log = logging.getLogger(__name__)
SOURCE = library.CSRC / "standalone" / "pause.c"
FLAGS = ("-O2", "-fPIC", "-shared", "-std=c11")  # no -fopenmp: no libgomp loaded with it
HINTS, ROUNDS = 20_000, 5  # 0.2-0.5 ms a round at 10-24 ns a hint; the fastest round counts


def build() -> Path:
    """Compile the probe if it is not in the cache yet; its path. RuntimeError says why not."""
    from minisgl_core.store.paths import cache_dir

    cc = library.compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join((cc, *FLAGS)).encode()).hexdigest()[:16]
    return library.compile_once([cc, *FLAGS, str(SOURCE)],
                                cache_dir() / "native" / f"minisgl-pause-{key}.so")


@functools.cache
def spin_hint_ns() -> float | None:
    """Nanoseconds one spin-wait hint takes here (the fastest of a few rounds), or None where
    the probe cannot be built or the CPU has no such hint (logged)."""
    try:
        probe = ctypes.CDLL(str(build()))
    except (RuntimeError, OSError) as exc:
        log.warning("cannot time the CPU's spin-wait hint: %s", exc)
        return None
    probe.minisgl_spin_hint_ns.restype = ctypes.c_double
    probe.minisgl_spin_hint_ns.argtypes = [ctypes.c_int, ctypes.c_int]
    ns = float(probe.minisgl_spin_hint_ns(HINTS, ROUNDS))
    return ns if ns > 0 else None
