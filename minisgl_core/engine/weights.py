"""Read a model directory's safetensors, one tensor at a time (the directory is found by
``minisgl_core.store`` and the resolvers, never here), or make random ones (``load_format``)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minisgl_core import deprecated, kernels
from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.paths import cache_dir
from minisgl_core.store.random_weights import RandomCheckpoint, tokenizer_size

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# the names that lived here before the model store had a package of its own
__getattr__ = deprecated.forwarder(__name__)


LOAD_FORMATS = ("auto", "dummy")  # vLLM's names: the safetensors, or random weights

_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
           "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
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
                if info["dtype"] not in _DTYPES:
                    raise ValueError(f"{file.name}: tensor {name!r} is stored as "
                                     f"{info['dtype']}, which minisgl does not read")
                start, end = info["data_offsets"]
                self._index[name] = (file, info["dtype"], info["shape"], 8 + size + start,
                                     end - start)
        self.bytes_read = 0  # what get() has read so far
        self.stored: Counter[str] = Counter()  # bytes read by stored dtype ("bfloat16": ...)

    def names(self) -> list[str]:
        """Every tensor name, sorted."""
        return sorted(self._index)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def get(self, name: str) -> torch.Tensor:
        """Read one tensor (CPU, its stored dtype); KeyError names the missing tensor.

        The caller converts it to the compute dtype (``tensor.to(dtype)``): one tensor at a time,
        so a bf16 or fp16 checkpoint never has a second full copy in memory.
        """
        import torch

        if name not in self._index:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        file, dtype, shape, offset, nbytes = self._index[name]
        raw = torch.empty(nbytes, dtype=torch.uint8)
        with open(file, "rb") as f:
            f.seek(offset)
            if f.readinto(memoryview(raw.numpy())) != nbytes:
                raise ValueError(f"{file.name} is truncated (tensor {name!r})")
        self.bytes_read += nbytes
        self.stored[_DTYPES[dtype]] += nbytes
        return raw.view(getattr(torch, _DTYPES[dtype])).reshape(shape)


@dataclass(frozen=True)
class LoadReport:
    """How a model's weights were loaded: for the log, and for tests and benchmarks."""

    seconds: float
    bytes_read: int
    stored: tuple[str, ...]  # the checkpoint's dtypes, most bytes first
    dtype: str  # what the engine computes in

    def describe(self) -> str:
        mib = self.bytes_read / 2**20
        return (f"read {mib:.0f} MiB" if mib >= 10 else f"read {mib:.2f} MiB") + (
            f" of {'+'.join(self.stored) or 'nothing'} and loaded it as {self.dtype} in "
            f"{self.seconds:.2f} s")


def apply_kernels(model: Any, dtype: torch.dtype) -> None:
    """Give a decoder (a model with ``use_kernels``) the matmul kernels measured for its shapes
    on this host, before its weights are packed for them; a model that has some keeps them, and
    a plugin model without the method runs its own. A model set ``deterministic`` gets the
    batch-invariant kernels, nothing measured."""
    if hasattr(model, "use_kernels") and getattr(model, "kernels", None) is None:
        import torch

        shapes = model.linear_shapes()
        layers = getattr(getattr(model, "cfg", None), "num_layers", 0)
        model.use_kernels(kernels.choose(shapes, torch.device(model.device), dtype,
                                         model.quantization, shared=model.shared_roles(),
                                         deterministic=getattr(model, "deterministic", False),
                                         copy_weights=kernels.choice.layer_weights(shapes,
                                                                                   layers)))


def load_weights(model: Any, path: Path, dtype: torch.dtype,
                 load_format: str = "auto") -> LoadReport:
    """``model.load_weights`` from the directory's safetensors (``load_format`` "auto") or
    random ones made from its config.json ("dummy"), timed and logged."""
    start = time.perf_counter()
    if load_format == "dummy":
        ckpt: Checkpoint | RandomCheckpoint = RandomCheckpoint(
            json.loads((path / "config.json").read_text()), tokens=tokenizer_size(path))
    elif load_format == "auto":
        ckpt = Checkpoint(path)
    else:
        raise ValueError(f'load_format must be one of {", ".join(LOAD_FORMATS)}, '
                         f"got {load_format!r}")
    apply_kernels(model, dtype)
    model.load_weights(ckpt)
    report = LoadReport(time.perf_counter() - start, ckpt.bytes_read,
                        tuple(name for name, _ in ckpt.stored.most_common()),
                        str(dtype).removeprefix("torch."))
    if load_format == "dummy":
        log.warning("weights of %s are RANDOM (--load-format dummy): %s; its answers mean "
                    "nothing", path.name, report.describe().replace("read", "made", 1))
    else:
        log.info("weights of %s: %s", path.name, report.describe())
    return report


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


def make_deterministic(model: Any, compile: bool) -> None:
    """Set a decoder to its batch-invariant kernels and ops (before its weights load);
    ValueError for a model that has none (a plugin's own) or cannot compile them."""
    if not hasattr(model, "deterministic"):
        raise ValueError(f"deterministic: {type(model).__name__} has no batch-invariant mode "
                         "(the built-in Llama, Qwen2, Qwen3 and Gemma 3 decoders have)")
    if compile and not getattr(model, "compiles_deterministic", False):
        raise ValueError(f"deterministic with compile: {type(model).__name__}'s compiled step "
                         "is not batch-invariant; run it eagerly (no --compile)")
    model.deterministic = True


__all__ = ["LOAD_FORMATS", "Checkpoint", "LoadReport", "ModelNotFoundError", "cache_dir",
           "load_weights", "make_deterministic", "release_freed_memory"]
