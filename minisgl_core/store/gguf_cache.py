"""GGUF files converted once into HF-format directories, cached by content.

``ensure_converted(file)`` names the cached directory of a file's content (sha256), converting it
first when it is not there yet: one converter at a time (a file lock, as several processes or
services may start together), into a temporary directory renamed into place, with a marker
written last, so a half-written directory is never trusted.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.naming import MARKER
from minisgl_core.store.paths import cache_dir

# general.architecture of a GGUF file -> the Hugging Face architecture it converts to
GGUF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                      "qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM"}
# bump when the converter's output changes: older directories are redone (2: the marker
# records the GGUF types of the weight matrices, which ``--quantization auto`` reads; 3: of the
# matmuls only, the token embedding counted where it is also the LM head)
CONVERTER_VERSION = 3


def gguf_root() -> Path:
    """Where converted GGUFs live: ``cache_dir()/gguf``."""
    return cache_dir() / "gguf"


def gguf_architecture(gguf: Path) -> str:
    """The Hugging Face architecture of a GGUF file; ModelNotFoundError when it is not a GGUF
    file or holds an architecture minisgl does not convert."""
    try:
        from gguf import GGUFReader

        field = GGUFReader(gguf, "r").fields.get("general.architecture")
        name = str(field.contents()) if field is not None else ""
    except Exception as exc:  # noqa: BLE001 - any parse error means the same to the user
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ModelNotFoundError(f"{gguf} is not a readable GGUF file ({why})") from None
    if name not in GGUF_ARCHITECTURES:
        raise ModelNotFoundError(
            f"{gguf.name}: GGUF architecture {name or '(none)'!r} is not one minisgl serves "
            f"(GGUF architectures: {', '.join(sorted(GGUF_ARCHITECTURES))})")
    return GGUF_ARCHITECTURES[name]


def gguf_weight_types(gguf: Path) -> dict[str, list[int]]:
    """GGUF type name -> [tensors, weights] over the file's matmul weights (its 2-D tensors; the
    token embedding only where it is also the LM head, i.e. the file has no ``output.weight``),
    e.g. ``{"Q4_1": [210, ...], "Q8_0": [1, ...]}`` for the default model: Q4_1 layers and a
    Q8_0 embedding tied to the head."""
    from gguf import GGUFReader

    tensors = GGUFReader(gguf, "r").tensors
    tied = not any(t.name == "output.weight" for t in tensors)
    types: dict[str, list[int]] = {}
    for tensor in tensors:
        if len(tensor.shape) != 2:  # norms and biases stay F32 in every file type
            continue
        if tensor.name == "token_embd.weight" and not tied:  # a lookup table, not a matmul
            continue
        count = types.setdefault(tensor.tensor_type.name, [0, 0])
        count[0] += 1
        count[1] += int(tensor.n_elements)
    return types


def content_hash(path: Path) -> str:
    """sha256 of the file, remembered beside the cache by (path, size, mtime) so that a large
    file is read once, not at every launch."""
    stat = path.stat()
    stamp = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    key = hashlib.sha1(str(path).encode()).hexdigest()[:16]
    memo = gguf_root() / ".hashes" / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, KeyError):
        known = json.loads(memo.read_text())
        if {k: known[k] for k in stamp} == stamp:
            return str(known["sha256"])
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    sha = digest.hexdigest()
    with contextlib.suppress(OSError):  # a cache of a cache: losing it costs one more read
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps({**stamp, "sha256": sha}))
        os.replace(tmp, memo)
    return sha


def ensure_converted(gguf: Path, *, name: str | None = None,
                     architectures: Collection[str] | None = None) -> Path:
    """The HF-format directory of ``gguf``'s content, converted first if needed.

    ``name`` is what the directory is served as (default: the file's stem; the first
    conversion of a content names it). ``architectures``, when given, are those the model
    registry can build: any other is refused before the (long) conversion.
    """
    gguf = Path(gguf).expanduser().resolve()
    if not gguf.is_file():
        raise ModelNotFoundError(f"no such GGUF file: {gguf}")
    sha = content_hash(gguf)
    root = gguf_root()
    found = _converted(root, sha)
    if found is not None:  # its marker names the architecture: no need to read the GGUF
        _check_architecture(gguf, str((read_marker(found) or {}).get("architecture", "")),
                            architectures)
        return found
    # reading the header imports gguf (and numpy, yaml): only where a conversion is due, so
    # that a launcher serving a converted file stays light
    arch = gguf_architecture(gguf)
    _check_architecture(gguf, arch, architectures)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{sha[:16]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _converted(root, sha)  # by whoever held the lock before us
        if found is not None:
            return found
        target = root / f"{gguf.stem}-{sha[:16]}"
        tmp = root / f".{target.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _convert_in_subprocess(gguf, tmp, arch)
            marker = {"sha256": sha, "converter": CONVERTER_VERSION, "source": gguf.name,
                      "name": name or gguf.stem, "architecture": arch,
                      "weight_types": gguf_weight_types(gguf)}
            (tmp / MARKER).write_text(json.dumps(marker))
            if target.exists():  # an older converter's or a foreign directory: replaced whole
                shutil.rmtree(target)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _check_architecture(gguf: Path, arch: str, architectures: Collection[str] | None) -> None:
    if architectures is not None and arch not in architectures:
        raise ModelNotFoundError(f"{gguf.name} is a {arch}, which minisgl does not serve "
                                 f"(supported: {', '.join(sorted(architectures))})")


def read_marker(path: Path) -> dict[str, object] | None:
    """The marker of a converted directory, or None when it has none (or it is unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        marker = json.loads((path / MARKER).read_text())
        return marker if isinstance(marker, dict) else None
    return None


def _converted(root: Path, sha: str) -> Path | None:
    """The complete directory of this content, whatever the file was called when converted."""
    for path in sorted(root.glob(f"*-{sha[:16]}")):
        if _is_complete(path, sha):
            return path
    return None


def _is_complete(target: Path, sha: str) -> bool:
    marker = read_marker(target)
    return marker is not None and marker.get("sha256") == sha \
        and marker.get("converter") == CONVERTER_VERSION


def _convert_in_subprocess(gguf: Path, out: Path, arch: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "minisgl_core.store.convert", str(gguf), str(out), arch]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tail = ""
    # the progress bar goes on to our stderr; the end of it is kept to say why it failed
    while chunk := proc.stderr.read1(4096):
        text = decoder.decode(chunk)
        sys.stderr.write(text)
        sys.stderr.flush()
        tail = (tail + text)[-8192:]
    if proc.wait() != 0:
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise ModelNotFoundError(f"converting {gguf.name} failed: {why}")


__all__ = ["CONVERTER_VERSION", "GGUF_ARCHITECTURES", "content_hash", "ensure_converted",
           "gguf_architecture", "gguf_root", "gguf_weight_types", "read_marker"]
