"""The one way from ``--model`` to a model: the resolve hook gives a directory, the model
registry gives the class of its architecture. The launcher, the scheduler processes,
``minisgl tp-worker``, the offline ``LLM`` and the benchmarks all go through here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minisgl_core.plugin.registry import RegistryError
from minisgl_core.store.checkpoint_check import quantized_refusal
from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.naming import model_name_of

if TYPE_CHECKING:
    import pluggy

    from minisgl_core.plugin.registry import Registry


def resolve_model(pm: pluggy.PluginManager, spec: str | None, *, revision: str | None = None,
                  gguf_file: str | None = None,
                  architectures: Sequence[str] | None = None) -> str:
    """``--model`` (None = the default model) as a local HF-format directory, through the
    ``minisgl_resolve_model`` hook (plugins first, the core's resolver last).

    ``revision`` and ``gguf_file`` qualify a Hub id; ``architectures`` (the model registry's
    names) let a resolver refuse an unsupported model before it fetches any weights.
    """
    archs = tuple(architectures) if architectures is not None else None
    try:
        path: str | None = pm.hook.minisgl_resolve_model(
            spec=spec, revision=revision, gguf_file=gguf_file, architectures=archs)
    except ModelNotFoundError:
        raise  # already one line that says what to do
    except Exception as exc:  # conversion and lookup errors are user-facing
        lines = [ln for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
        raise ModelNotFoundError(f"cannot load model {spec or 'default'}: {lines[0]}") from exc
    if path:
        return str(path)
    where = Path(spec or "").expanduser()
    if not where.exists():
        why = "no such directory, and no plugin resolves it"
    elif not (where / "config.json").is_file():
        why = "not an HF-format model directory (no config.json), and no plugin resolves it"
    else:
        why = "no plugin resolves it"
    raise ModelNotFoundError(f"cannot find model {spec!r}: {why}")


def architecture(model_dir: str | Path) -> str:
    """``architectures[0]`` of the model directory's config.json; ModelNotFoundError when it
    has none or the checkpoint is pre-quantized (minisgl loads float weights)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
        archs = config.get("architectures") or []
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelNotFoundError(f"cannot read {path}: {exc}") from None
    if not archs:
        raise ModelNotFoundError(f"{path} has no 'architectures' entry")
    refusal = quantized_refusal(config)
    if refusal:
        raise ModelNotFoundError(f"{model_name_of(Path(model_dir))} {refusal}")
    return str(archs[0])


def check_supported(models: Registry[Any], model_dir: str | Path) -> str:
    """The directory's architecture; ModelNotFoundError listing the supported ones when no
    class is registered for it. Imports nothing (the launcher checks before any worker)."""
    arch = architecture(model_dir)
    if arch not in models:
        known = ", ".join(models.names())
        raise ModelNotFoundError(f"unsupported model architecture {arch!r} (supported: {known})")
    return arch


def model_class(models: Registry[Any], model_dir: str | Path) -> Any:
    """The class registered (``minisgl_register_models``) for the directory's architecture;
    ModelNotFoundError lists the supported ones, a lazy target is imported here."""
    arch = check_supported(models, model_dir)
    try:
        return models.get(arch)
    except RegistryError as exc:  # two plugins registered it, or its module fails to import
        raise ModelNotFoundError(str(exc)) from exc


@dataclass(frozen=True)
class ResolvedModel:
    """A model directory and the class the engine builds for it."""

    path: str
    model_class: Any


def resolve(spec: str | None = None, pm: pluggy.PluginManager | None = None, *,
            revision: str | None = None, gguf_file: str | None = None) -> ResolvedModel:
    """Directory and class of ``spec`` through ``pm``'s plugins (a new manager when None)."""
    from minisgl_core.plugin.loading import build_manager, collect

    pm = pm if pm is not None else build_manager()
    models = collect(pm).models
    path = resolve_model(pm, spec, revision=revision, gguf_file=gguf_file,
                         architectures=models.names())
    return ResolvedModel(path, model_class(models, path))


__all__ = ["ModelNotFoundError", "ResolvedModel", "architecture", "check_supported", "model_class",
           "resolve", "resolve_model"]
