"""Read a model directory's safetensors, one tensor at a time (the directory is found by
``minisgl_core.store`` and the resolvers, never here)."""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.paths import cache_dir

if TYPE_CHECKING:
    import torch

# names that lived here before the model store had a package of its own
_MOVED = {"DEFAULT_PACKAGE": "minisgl_core.store.default_model",
          "DEFAULT_MODULE": "minisgl_core.store.default_model",
          "find_default_gguf": "minisgl_core.store.default_model",
          "ensure_default_model": "minisgl_core.store.default_model",
          "DEFAULT_NAME": "minisgl_core.store.naming", "MARKER": "minisgl_core.store.naming",
          "model_name_of": "minisgl_core.store.naming"}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    warnings.warn(f"minisgl_core.engine.weights.{name} moved to {_MOVED[name]}.{name}",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED[name]), name)


_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
           "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
           "BOOL": "bool"}


class Checkpoint:
    """The tensors of a model directory's *.safetensors files, read one at a time.

    Reads with plain file reads into private tensors rather than through a memory map: every
    mapped page a loader touches stays in the process's resident set for as long as the mapping
    lives, which would double the peak memory of loading a model.
    """

    def __init__(self, path: Path) -> None:
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ModelNotFoundError(f"no *.safetensors files in {path}")
        self._index: dict[str, tuple[Path, str, list[int], int, int]] = {}
        for file in files:
            with open(file, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size))
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                start, end = info["data_offsets"]
                self._index[name] = (file, info["dtype"], info["shape"], 8 + size + start,
                                     end - start)

    def names(self) -> list[str]:
        """Every tensor name, sorted."""
        return sorted(self._index)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def get(self, name: str) -> torch.Tensor:
        """Read one tensor (CPU, its stored dtype); KeyError names the missing tensor."""
        import torch

        if name not in self._index:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        file, dtype, shape, offset, nbytes = self._index[name]
        raw = torch.empty(nbytes, dtype=torch.uint8)
        with open(file, "rb") as f:
            f.seek(offset)
            if f.readinto(memoryview(raw.numpy())) != nbytes:
                raise ValueError(f"{file.name} is truncated (tensor {name!r})")
        return raw.view(getattr(torch, _DTYPES[dtype])).reshape(shape)


def release_freed_memory() -> None:
    """Hand the heap memory freed while loading back to the OS (glibc keeps it otherwise).

    Loading reads, fuses, packs and quantizes each layer through temporaries; glibc's malloc
    keeps most of what they freed in its arenas, so without this the process stays that much
    larger for its whole life (measured on the default model: 40 MiB in fp32, 157 MiB in int8).
    The Engine calls it once built, so the scheduler, every tensor-parallel rank and the offline
    ``LLM`` all get it. A no-op where the C library is not glibc.
    """
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


__all__ = ["Checkpoint", "ModelNotFoundError", "cache_dir", "release_freed_memory"]
