"""Default plugin: resolve --model to a local HF-format directory: the default model, a model
directory, a GGUF file (converted once) or a Hugging Face Hub id (fetched once)."""

from __future__ import annotations

from pathlib import Path

from minisgl_core.plugin.hookspecs import hookimpl
from minisgl_core.store.default_model import DEFAULT_SPECS
from minisgl_core.store.errors import ModelNotFoundError


@hookimpl(trylast=True)
def minisgl_resolve_model(spec: str | None, revision: str | None = None,
                          gguf_file: str | None = None,
                          architectures: tuple[str, ...] | None = None) -> str | None:
    """In order: the embedded SmolLM2 for None/""/"default"/"smollm2"; an existing path (a
    model directory as is, a ``.gguf`` file or a directory's ``gguf_file`` converted); else an
    ``ORG/NAME`` Hub id through ``store.hub``. None for anything else.

    Runs last so that plugin resolvers (other hubs, other caches) are asked first. Failures
    are one-line ModelNotFoundErrors.
    """
    if spec is None or spec.strip().lower() in DEFAULT_SPECS:
        if revision or gguf_file:
            raise ModelNotFoundError("--revision and --gguf-file need a Hub id or a path in "
                                     "--model, not the default model")
        from minisgl_core.store.default_model import ensure_default_model

        return str(ensure_default_model())
    path = Path(spec).expanduser()
    if path.exists():
        if revision:
            raise ModelNotFoundError(f"--revision is for Hub ids; {spec} is a local path")
        return _local(path, gguf_file, architectures)
    from minisgl_core.store import hub

    if hub.looks_like_repo_id(spec):
        return str(hub.fetch(spec, revision, gguf_file=gguf_file, architectures=architectures))
    return None


def _local(path: Path, gguf_file: str | None,
           architectures: tuple[str, ...] | None) -> str | None:
    from minisgl_core.store.gguf_cache import ensure_converted

    if gguf_file is not None:
        if not path.is_dir():
            raise ModelNotFoundError(f"--gguf-file names a file inside a directory or Hub "
                                     f"repo; {path} is a file")
        return str(ensure_converted(path / gguf_file, architectures=architectures))
    if path.is_file() and path.suffix.lower() == ".gguf":
        return str(ensure_converted(path, architectures=architectures))
    if path.is_dir() and (path / "config.json").is_file():
        return str(path.resolve())
    return None
