"""Default plugin: resolve --model to a local HF-format directory (default model included)."""

from __future__ import annotations

from pathlib import Path

from minisgl_core import hookimpl

DEFAULT_SPECS = ("", "default", "smollm2")  # --model values that mean the embedded SmolLM2


@hookimpl(trylast=True)
def minisgl_resolve_model(spec: str | None) -> str | None:
    """The embedded SmolLM2 for None/""/"default"/"smollm2"; an existing model directory as is.

    Runs last so that plugin resolvers (hub names, other caches) are asked first. Returns None
    for anything else; raises a one-line error when the default model's package is missing.
    """
    if spec is None or spec.strip().lower() in DEFAULT_SPECS:
        from minisgl_core.store.default_model import ensure_default_model

        return str(ensure_default_model())
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return str(path.resolve())
    return None
