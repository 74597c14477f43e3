"""Hugging Face Hub ids (``ORG/NAME``) through ``huggingface_hub``, into the shared HF cache.

Only the files the engine needs are fetched (config, tokenizer files, safetensors), with a
progress bar, into the cache huggingface_hub, transformers and vLLM share (``HF_HOME``,
``HF_HUB_CACHE``): a model one of them fetched is not fetched again, and huggingface_hub's file
locks make two services starting together safe. ``HF_TOKEN`` reaches private and gated repos;
``HF_HUB_OFFLINE=1`` (or no network) serves from the cache alone. Every failure is a one-line
``ModelNotFoundError`` saying what to do.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minisgl_core.store.checkpoint_check import quantized_refusal
from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.paths import hf_hub_cache

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
COMMIT = re.compile(r"[0-9a-f]{40}")
INDEX = "model.safetensors.index.json"
# everything the engine and the tokenizer processes read, besides the weights themselves
SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
               "tokenizer.model", "chat_template.jinja", "chat_template.json", INDEX)
PICKLES = (".bin", ".pt", ".pth", ".ckpt")


def looks_like_repo_id(spec: str) -> bool:
    """``ORG/NAME`` (one slash, Hub characters only)."""
    return REPO_ID.fullmatch(spec) is not None


@dataclass(frozen=True)
class HubSettings:
    """What the environment says now (huggingface_hub read it once, at its import)."""

    endpoint: str
    cache: Path
    offline: bool
    token_set: bool

    @classmethod
    def from_env(cls) -> HubSettings:
        from huggingface_hub import get_token

        flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
        return cls(endpoint, hf_hub_cache(), flag.strip().upper() in {"1", "ON", "YES", "TRUE"},
                   bool(get_token()))

    def kwargs(self) -> dict[str, Any]:
        """The arguments every huggingface_hub call gets, so the environment of now counts."""
        return {"endpoint": self.endpoint, "cache_dir": str(self.cache)}


_fetched: dict[tuple[str, str | None, str | None, str], Path] = {}  # once per process


def fetch(repo_id: str, revision: str | None = None, *, gguf_file: str | None = None,
          architectures: Collection[str] | None = None) -> Path:
    """The local directory (a snapshot in the HF cache) of ``repo_id`` at ``revision``, or of
    its ``gguf_file`` converted; fetched first when missing and the Hub is reachable.

    ``architectures``, when given, are those the model registry can build: another is refused
    after config.json, before the weights are fetched.
    """
    settings = HubSettings.from_env()
    for name in ("httpx", "httpx2"):  # one INFO line per request under the launcher's logging
        if logging.getLogger(name).level == logging.NOTSET:
            logging.getLogger(name).setLevel(logging.WARNING)
    key = (repo_id, revision, gguf_file, str(settings.cache))
    if key not in _fetched:
        _fetched[key] = _fetch(repo_id, revision, gguf_file, architectures, settings)
    return _fetched[key]


def _fetch(repo_id: str, revision: str | None, gguf_file: str | None,
           architectures: Collection[str] | None, settings: HubSettings) -> Path:
    if settings.offline:
        return _from_cache(repo_id, revision, gguf_file, architectures, settings,
                           "HF_HUB_OFFLINE is set")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError

    api = HfApi(endpoint=settings.endpoint)
    try:
        info = api.model_info(repo_id, revision=revision)
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"{repo_id} has no revision {revision!r} on the Hub "
                                 f"({settings.endpoint})") from None
    except Exception as exc:  # noqa: BLE001 - sorted below: every kind gets its own message
        status = _status(exc)
        if isinstance(exc, HfHubHTTPError) and status is not None and status < 500 \
                and status != 429:
            raise _refusal(exc, repo_id, settings) from None
        if not _unreachable(exc):
            raise
        why = f"cannot reach the Hub at {settings.endpoint} ({_one_line(exc)})"
        return _from_cache(repo_id, revision, gguf_file, architectures, settings, why)
    files = [s.rfilename for s in info.siblings or []]
    try:
        if gguf_file is not None:
            return _fetch_gguf(repo_id, revision, gguf_file, files, architectures, settings)
        weights = _weight_files(repo_id, files)
        config = _download(repo_id, "config.json", revision, settings)
        _check_architecture(repo_id, Path(config).parent, architectures)
        if INDEX in files:  # sharded: exactly the shards the index names
            index = Path(_download(repo_id, INDEX, revision, settings))
            weights = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        wanted = [f for f in files if f in SMALL_FILES] + weights
        path = Path(_snapshot(repo_id, revision, wanted, settings))
    except ModelNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - a refusal or a network failure mid-download
        if isinstance(exc, HfHubHTTPError) and _status(exc) in (401, 403, 404):
            raise _refusal(exc, repo_id, settings) from None
        raise ModelNotFoundError(f"fetching {repo_id} from {settings.endpoint} failed: "
                                 f"{_one_line(exc)}") from None
    _check_complete(repo_id, path)
    return path


def _fetch_gguf(repo_id: str, revision: str | None, gguf_file: str, files: list[str],
                architectures: Collection[str] | None, settings: HubSettings) -> Path:
    from minisgl_core.store.gguf_cache import ensure_converted

    if gguf_file not in files:
        ggufs = [f for f in files if f.endswith(".gguf")]
        raise ModelNotFoundError(f"{repo_id} has no file {gguf_file!r} (its GGUF files: "
                                 f"{', '.join(ggufs) or 'none'})")
    local = _download(repo_id, gguf_file, revision, settings, progress=True)
    return ensure_converted(Path(local), name=repo_id, architectures=architectures)


def _download(repo_id: str, filename: str, revision: str | None, settings: HubSettings,
              progress: bool = False) -> str:
    """One file; with ``progress`` a bar on any stderr, else huggingface_hub's (terminals)."""
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo_id, filename, revision=revision,
                           tqdm_class=_progress() if progress else None, **settings.kwargs())


def _snapshot(repo_id: str, revision: str | None, files: list[str],
              settings: HubSettings) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id, revision=revision, allow_patterns=files,
                             tqdm_class=_progress(), **settings.kwargs())


def _progress() -> Any:
    """A bar that shows on any stderr, a log file included (huggingface_hub's own shows on a
    terminal only); none when HF_HUB_DISABLE_PROGRESS_BARS is set."""
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "").strip().upper() in {"1", "ON", "YES",
                                                                               "TRUE"}:
        return None
    from tqdm import tqdm

    class Bar(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)
            kwargs.setdefault("file", sys.stderr)
            super().__init__(*args, **kwargs)

    return Bar


def _weight_files(repo_id: str, files: list[str]) -> list[str]:
    """The top-level safetensors of a repo, or the one-line reason it has none to serve."""
    weights = [f for f in files if f.endswith(".safetensors") and "/" not in f]
    if weights:
        return weights
    ggufs = [f for f in files if f.endswith(".gguf")]
    if ggufs:
        raise ModelNotFoundError(f"{repo_id} holds GGUF files, not safetensors: add --gguf-file "
                                 f"NAME (one of: {', '.join(ggufs)})")
    pickles = [f for f in files if f.endswith(PICKLES)]
    if pickles:
        raise ModelNotFoundError(
            f"{repo_id} has no safetensors weights, only PyTorch pickles ({', '.join(pickles)}); "
            f"minisgl loads safetensors only (a revision or copy of the repo with *.safetensors "
            f"works)")
    raise ModelNotFoundError(f"{repo_id} has no weights minisgl can load (no *.safetensors)")


def _check_architecture(repo_id: str, model_dir: Path,
                        architectures: Collection[str] | None) -> None:
    try:
        config = json.loads((model_dir / "config.json").read_text())
        archs = config.get("architectures") or []
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelNotFoundError(f"{repo_id}: cannot read its config.json ({exc})") from None
    if not archs:
        raise ModelNotFoundError(f"{repo_id}: its config.json names no architecture")
    if architectures is not None and archs[0] not in architectures:
        raise ModelNotFoundError(f"{repo_id} is a {archs[0]}, which minisgl does not serve "
                                 f"(supported: {', '.join(sorted(architectures))})")
    refusal = quantized_refusal(config)
    if refusal:
        raise ModelNotFoundError(f"{repo_id} {refusal}")


def _check_complete(repo_id: str, path: Path) -> None:
    """config.json and every weight file the directory's index (or glob) names are there."""
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"{repo_id}: {path} has no config.json")
    index = path / INDEX
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError) as exc:
            raise ModelNotFoundError(f"{repo_id}: unreadable {INDEX} ({exc})") from None
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            raise ModelNotFoundError(f"{repo_id}: the cached snapshot {path} misses "
                                     f"{', '.join(missing)}")
    elif not any(path.glob("*.safetensors")):
        raise ModelNotFoundError(f"{repo_id}: the cached snapshot {path} has no *.safetensors")


def cached_snapshot(repo_id: str, revision: str | None, cache: Path) -> Path | None:
    """The snapshot directory of ``repo_id`` at ``revision`` (a branch, tag or commit) in the HF
    cache, or None when the cache has none (never touches the network)."""
    folder = cache / f"models--{repo_id.replace('/', '--')}"
    rev = revision or "main"
    commit = rev if COMMIT.fullmatch(rev) else None
    if commit is None:
        try:
            commit = (folder / "refs" / rev).read_text().strip()
        except OSError:
            return None
    snapshot = folder / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def _from_cache(repo_id: str, revision: str | None, gguf_file: str | None,
                architectures: Collection[str] | None, settings: HubSettings,
                why: str) -> Path:
    snapshot = cached_snapshot(repo_id, revision, settings.cache)
    at = f" at revision {revision}" if revision else ""
    if snapshot is None or (gguf_file is not None and not (snapshot / gguf_file).is_file()):
        what = f"{repo_id}/{gguf_file}" if gguf_file else repo_id
        raise ModelNotFoundError(f"{why}, and {what}{at} is not in the Hugging Face cache "
                                 f"({settings.cache})")
    if gguf_file is not None:
        from minisgl_core.store.gguf_cache import ensure_converted

        return ensure_converted(snapshot / gguf_file, name=repo_id, architectures=architectures)
    _check_complete(repo_id, snapshot)
    _check_architecture(repo_id, snapshot, architectures)
    return snapshot


def _refusal(exc: Exception, repo_id: str, settings: HubSettings) -> ModelNotFoundError:
    """The Hub said no: an unknown (or private) repo, a gated one, a bad token."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    page = f"{settings.endpoint}/{repo_id}"
    if isinstance(exc, GatedRepoError):
        if settings.token_set:
            return ModelNotFoundError(f"{repo_id} is gated and the token in HF_TOKEN has no "
                                      f"access yet: accept its terms at {page}")
        return ModelNotFoundError(f"{repo_id} is gated: accept its terms at {page}, then set "
                                  f"HF_TOKEN to a token of that account")
    if isinstance(exc, RepositoryNotFoundError):
        hint = "check HF_TOKEN's access" if settings.token_set else \
            "set HF_TOKEN if it is private"
        return ModelNotFoundError(f"no model {repo_id!r} on the Hub ({settings.endpoint}): "
                                  f"check the name, or {hint}")
    return ModelNotFoundError(f"the Hub refused {repo_id} ({_one_line(exc)})")


def _status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _unreachable(exc: Exception) -> bool:
    """No network, a dead endpoint or a Hub in trouble: the cache may still serve."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled | OSError | TimeoutError):
        return True
    if isinstance(exc, HfHubHTTPError):
        return True  # 5xx and 429 (the other statuses are refusals, sorted out before)
    return type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "requests")


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


__all__ = ["HubSettings", "cached_snapshot", "fetch", "looks_like_repo_id"]
