"""Default plugin: resolve --model to a local HF-format directory (default model included)."""

from __future__ import annotations

from minisgl_core import hookimpl


@hookimpl(trylast=True)
def minisgl_resolve_model(spec: str | None) -> str | None:
    """The embedded SmolLM2 for None/"default"/"smollm2", else an existing model directory.

    Runs last so that plugin resolvers (hub names, other caches) are asked first; raises a
    one-line error for a missing default-model package or a path that is not a model.
    """
    from minisgl_core.engine.weights import resolve_model

    return str(resolve_model(spec))
