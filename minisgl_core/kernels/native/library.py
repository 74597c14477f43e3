"""The project's small native library (every C file under csrc/ but standalone/: the matmuls, the
paged decode attention): built with the system C compiler into a cache directory keyed by the
sources, their names and the flags, loaded through ctypes.

``library()`` builds it on first use when missing and returns None (its reason logged once, and
kept in ``failure()``) when there is no compiler or the build fails: callers then use their
pure-torch fallback. ``python -m minisgl_core.kernels.native`` builds it ahead (``make setup``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
CSRC = Path(__file__).parent.parent / "csrc"
# every C file under csrc/, so a new kernel needs no edit here, but those of csrc/standalone/,
# each a library of its own (pause.py); sorted: a stable build key
SOURCES = tuple(sorted(p for p in CSRC.glob("**/*.c") if p.parent.name != "standalone"))
HEADERS = tuple(sorted(CSRC.glob("**/*.h")))  # in the build key too
# -O3 only: the AVX2 and AVX-512 paths carry their own target attributes and are chosen at run
# time (cpuid), so one build runs on any x86-64 host. OpenMP resolves to the libgomp that torch
# has already loaded (same soname): one thread pool, not two spinning against each other.
# -fno-math-errno: expf in a simd loop may then be libmvec's vector one
FLAGS = ("-O3", "-fPIC", "-shared", "-fopenmp", "-std=c11", "-fno-math-errno")
LIBS = ("-lm",)  # after the sources, where the linker looks for what they use
ISAS = {"c": 0, "avx2": 1, "avx512": 2}

_lib: ctypes.CDLL | None = None
_failure: str | None = None
_tried = False
_best_isa: int | None = None


def compiler() -> str | None:
    """``$CC``, else cc / gcc / clang, whichever is on PATH first."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def target(cc: str) -> Path:
    """Where the library built from today's sources with ``cc`` and FLAGS lives."""
    from minisgl_core.store.paths import cache_dir

    text = (source_digest_input()
            + " ".join((cc, *FLAGS, *LIBS)).encode())
    return cache_dir() / "native" / f"minisgl-{hashlib.sha256(text).hexdigest()[:16]}.so"


@functools.cache
def source_digest() -> str:
    """A digest of the sources and headers: the kernels' code, whose speed cached timings hold
    (kernel choice's cache key)."""
    return hashlib.sha256(source_digest_input()).hexdigest()[:16]


def source_digest_input() -> bytes:
    """Each source's and header's path under csrc/ and its bytes: a moved file is a new build."""
    return b"".join(s.relative_to(CSRC).as_posix().encode() + b"\0" + s.read_bytes()
                    for s in (*SOURCES, *HEADERS))


def build() -> Path:
    """Compile the library if it is not in the cache yet; its path. RuntimeError says why not."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    return compile_once([cc, *FLAGS, *map(str, SOURCES), *LIBS], target(cc))


def compile_once(cmd: list[str], path: Path) -> Path:
    """``path``, compiled by ``cmd`` (a compiler command but its ``-o``) unless it exists."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}.so")
    try:
        run_compiler([*cmd, "-o", str(tmp)], timeout=120)
    except RuntimeError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)  # atomic: a concurrent build of the same key is harmless
    return path


def run_compiler(cmd: list[str], timeout: float = 300.0) -> None:
    """Run one compiler command; RuntimeError with the command and its error's tail if it fails."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{' '.join(cmd)}: {exc}") from exc
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-600:]}")


_CTYPES = {"int": ctypes.c_int, "float": ctypes.c_float, "void": None}


def prototypes(header: Path | None = None) -> dict[str, tuple[Any, list[Any]]]:
    """name -> (restype, argtypes) of every function ``minisgl_kernels.h`` declares: the one
    list of entry points, read rather than written out again here."""
    text = re.sub(r"/\*.*?\*/", "", (header or CSRC / "minisgl_kernels.h").read_text(), flags=re.S)
    found: dict[str, tuple[Any, list[Any]]] = {}
    for ret, name, args in re.findall(r"^(int|void|float)\s+(\w+)\(([^)]*)\);", text,
                                      flags=re.M):
        params = [a.strip() for a in args.split(",") if a.strip() and a.strip() != "void"]
        found[name] = (_CTYPES[ret], [ctypes.c_void_p if "*" in a else
                                      _CTYPES[a.split()[-2]] for a in params])
    return found


def _bind(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in prototypes().items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


def library() -> ctypes.CDLL | None:
    """The loaded library (built now if needed), or None where it cannot be (logged once)."""
    global _lib, _failure, _tried
    if not _tried:
        _tried = True
        try:
            import torch  # noqa: F401  (its libgomp first: ours then binds to it)

            from minisgl_core.kernels.cpu_features import export_mask

            export_mask()  # the library reads MINISGL_CPU_FEATURES itself
            lib = ctypes.CDLL(str(build()))
            _bind(lib)
            _lib = lib
        except (RuntimeError, OSError) as exc:
            _failure = str(exc)
            log.warning("native weight-only kernels unavailable, using the torch fallback "
                        "(dequantize, then matmul): %s", _failure)
    return _lib


def failure() -> str | None:
    """Why ``library()`` is None (None when it loaded or was not tried)."""
    return _failure


def best_isa() -> int:
    """The widest path this CPU runs (ISAS values); 0 without the library. Asked of the library
    once: every native call passes it, and a ctypes call is microseconds once a step's weights
    have left the caches (the kernels' own choices are made once a process too)."""
    global _best_isa
    if _best_isa is None:
        lib = library()
        _best_isa = 0 if lib is None else int(lib.wo_best_isa())
    return _best_isa
