"""What the caches hold that minisgl can serve (``minisgl models``), and removing it.

Two places: the Hugging Face cache (a model repo fetched by minisgl, vLLM or transformers, with
a config.json) and minisgl's converted GGUFs (``cache_dir()/gguf``). Nothing here touches the
network or imports torch.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from minisgl_core.store.gguf_cache import gguf_root, read_marker
from minisgl_core.store.naming import hub_repo_of
from minisgl_core.store.paths import hf_hub_cache


@dataclass(frozen=True)
class CachedModel:
    """One servable entry of a cache."""

    name: str  # what --model takes to serve it (a Hub id; a converted GGUF's served name)
    kind: str  # "hub" or "gguf"
    architecture: str
    size_bytes: int  # on disk: a Hub repo's blobs (every revision), a converted directory
    path: Path  # the Hub repo's folder in the cache, or the converted directory
    detail: str = ""  # the snapshot's commit (hub), the GGUF file it came from (gguf)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "architecture": self.architecture,
                "size_bytes": self.size_bytes, "path": str(self.path), "detail": self.detail}


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _architecture(model_dir: Path) -> str | None:
    try:
        archs = json.loads((model_dir / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return None
    return str(archs[0]) if archs else None


def hub_models(architectures: Collection[str], cache: Path | None = None) -> list[CachedModel]:
    """The model repos in the HF cache whose newest snapshot has a servable architecture."""
    root = cache or hf_hub_cache()
    out = []
    for repo in sorted(root.glob("models--*")):
        snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
        for snapshot in reversed(snapshots):
            arch = _architecture(snapshot)
            if arch is None:
                continue
            if arch in architectures:
                out.append(CachedModel(hub_repo_of(snapshot) or repo.name, "hub", arch,
                                       _size(repo / "blobs"), repo, snapshot.name[:12]))
            break
    return out


def converted_models(architectures: Collection[str]) -> list[CachedModel]:
    """minisgl's converted GGUFs (complete ones: a marker) of a servable architecture."""
    root = gguf_root()
    out = []
    for path in sorted(root.glob("*")) if root.is_dir() else []:
        marker = read_marker(path) if path.is_dir() and not path.name.startswith(".") else None
        if marker is None:
            continue
        arch = str(marker.get("architecture") or _architecture(path) or "?")
        if arch in architectures:
            out.append(CachedModel(str(marker.get("name") or path.name), "gguf", arch,
                                   _size(path), path, str(marker.get("source") or "")))
    return out


def cached_models(architectures: Collection[str]) -> list[CachedModel]:
    """Every servable entry: Hub repos, then converted GGUFs."""
    return hub_models(architectures) + converted_models(architectures)


def remove(name: str, architectures: Collection[str]) -> list[CachedModel]:
    """Delete every entry served as ``name`` (a Hub repo with all its revisions, converted
    GGUFs); returns what was removed (empty: nothing is called that)."""
    gone = [m for m in cached_models(architectures) if m.name == name or m.path.name == name]
    for model in gone:
        shutil.rmtree(model.path)
    return gone


__all__ = ["CachedModel", "cached_models", "converted_models", "hub_models", "remove"]
