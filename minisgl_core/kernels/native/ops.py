"""The native kernels as torch operators (csrc/torch_ops.cpp): one C++ library, built against
this torch into the cache directory, that registers ``minisgl::native_linear`` and
``minisgl::native_decode_attention`` with torch's dispatcher.

A Linear whose kernels it knows (every kernel but the W8A8 int8 ones) is registered with it once
at load (``register``) and from then on runs by one dispatcher call, eagerly and inside compiled
graphs, whose C++ wrapper calls it without entering Python. Where the library cannot be built
(no C++ compiler, a torch without its headers) ``available()`` is False, the reason is logged
once, and the Python paths (linear.py, ops.py) run instead. ``MINISGL_NATIVE_OPS=0``
turns it off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch

from minisgl_core.kernels import handles
from minisgl_core.kernels.native import library as native

log = logging.getLogger(__name__)
SOURCE = native.CSRC / "torch_ops.cpp"
CXX_FLAGS = ("-O2", "-fPIC", "-std=c++20", "-Wno-c++20-extensions")
# what each Kernel is called in torch_ops.cpp (kind_of); a Linear using any other stays in Python
KINDS = frozenset({"dense", "dense-hf", "onednn", "onednn-rows", "onednn-hf", "amx-hf", "int8-wo",
                   "int4", "int8-wo-amx", "int4-amx", "int8-wo-gemm", "int4-gemm",
                   "int4-panels", "int8-wo-panels", "int8-wo-dequant", "int4-dequant",
                   "int4-panels-dequant", "int4-panels-amx", "int4-copy-panels",
                   "int4-copy-panels-amx", "int8-wo-panels-split",
                   "int4-copy-amx", "int4-copy-dense"})

_loaded: bool | None = None
_failure: str | None = None


def cxx_compiler() -> str | None:
    """``$CXX``, else c++ / g++ / clang++, whichever is on PATH first."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def _torch_paths() -> tuple[list[str], str]:
    from torch.utils.cpp_extension import include_paths

    return include_paths(), str(Path(torch.__file__).parent / "lib")


def target(cc: str, cxx: str) -> Path:
    """Where the library built from today's sources, compilers and torch lives."""
    from minisgl_core.store.paths import cache_dir

    parts = [native.source_digest_input(), SOURCE.read_bytes()]
    parts.append(" ".join((cc, cxx, *native.FLAGS, *CXX_FLAGS, torch.__version__,
                           str(torch._C._GLIBCXX_USE_CXX11_ABI))).encode())
    key = hashlib.sha256(b"".join(parts)).hexdigest()[:16]
    return cache_dir() / "native" / f"minisgl-ops-{key}.so"


def build() -> Path:
    """Compile the library if it is not in the cache yet; its path. RuntimeError says why not."""
    cc, cxx = native.compiler(), cxx_compiler()
    if cc is None or cxx is None:
        raise RuntimeError("no C and C++ compiler (cc / c++, gcc / g++, clang / clang++) on PATH")
    path = target(cc, cxx)
    if path.is_file():
        return path
    includes, libdir = _torch_paths()
    if not (Path(includes[0]) / "torch" / "library.h").is_file():
        raise RuntimeError(f"this torch ships no C++ headers ({includes[0]})")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        objects = []
        flags = [f for f in native.FLAGS if f != "-shared"]  # the C kernels, as in library.py
        for src in native.SOURCES:
            # named by its path under csrc/: two folders may hold files of one name
            obj = str(Path(tmp) / (src.relative_to(native.CSRC).as_posix().replace("/", "_")
                                   .removesuffix(".c") + ".o"))
            native.run_compiler([cc, *flags, "-c", str(src), "-o", obj])
            objects.append(obj)
        ops = str(Path(tmp) / "torch_ops.o")
        native.run_compiler([cxx, *CXX_FLAGS, *(f"-I{p}" for p in includes), "-c", str(SOURCE),
                             "-o", ops])
        out = str(Path(tmp) / "ops.so")
        native.run_compiler([cxx, "-shared", "-fopenmp", *objects, ops, "-o", out,
                             f"-L{libdir}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{libdir}",
                             *native.LIBS])
        os.replace(out, path)  # atomic: a concurrent build of the same key is harmless
    return path


def available() -> bool:
    """Whether the operators are registered (built and loaded now if needed)."""
    global _loaded, _failure
    if _loaded is None:
        _loaded = False
        if os.environ.get("MINISGL_NATIVE_OPS", "1") == "0":
            _failure = "turned off by MINISGL_NATIVE_OPS=0"
            return False
        try:
            from minisgl_core.kernels.cpu_features import export_mask

            export_mask()  # the operators' C kernels read MINISGL_CPU_FEATURES themselves
            torch.ops.load_library(str(build()))
            _register_fakes()
            _loaded = True
        except (RuntimeError, OSError) as exc:
            _failure = str(exc)
            log.warning("native torch operators unavailable, the Python paths run: %s", _failure)
    return _loaded


def failure() -> str | None:
    """Why ``available()`` is False (None when it loaded or was not tried)."""
    return _failure


def _register_fakes() -> None:
    @torch.library.register_fake("minisgl::native_linear")
    def _linear(x: torch.Tensor, residual: torch.Tensor | None, handle: str) -> torch.Tensor:
        return x.new_empty((x.shape[0], handles.linear_out_features(handle)))

    @torch.library.register_fake("minisgl::native_decode_attention")
    def _attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   kv_index: torch.Tensor, mask: torch.Tensor | None,
                   scale: float) -> torch.Tensor:
        return q.new_empty((q.shape[0], q.shape[1] * q.shape[2]))


def layout_tensors(packed: Any) -> list[torch.Tensor]:
    """A packed weight's tensors in its fields' order, as the library takes them: ``[w]``,
    ``[q, scale(, min)]``, or int4 panels with a copy beside them (matmul/wo_copy.py)
    ``[q, scale, min, w]``; none from a library's opaque packed weight."""
    if isinstance(packed, torch.Tensor):
        return [packed]
    if isinstance(packed, tuple | list):
        return [t for part in packed for t in layout_tensors(part)]
    if dataclasses.is_dataclass(packed):  # Int4Panels, PanelsCopy, Int8Weight, ...
        return [t for f in dataclasses.fields(packed)
                for t in layout_tensors(getattr(packed, f.name))]
    return []


def register(linear: Any) -> bool:
    """Hand ``linear`` (a linear.Linear) to the library, which then runs it by its handle;
    False where it cannot (the library is missing, a kernel it does not know, not on the CPU).
    The entry is dropped when the Linear is garbage."""
    kernels = linear.kernels
    if not all(k.name in KINDS for k in kernels):
        return False
    tensors = layout_tensors(linear.weight)
    if tensors[0].device.type != "cpu" or not available():
        return False
    minimums = [getattr(k, "minimum", 1) for k in kernels]
    torch.ops.minisgl.native_linear_register(
        linear.handle, [k.name for k in kernels], minimums, tensors, linear.bias,
        linear.in_features, linear.out_features)
    weakref.finalize(linear, torch.ops.minisgl.native_linear_drop, linear.handle)
    return True
