"""Model architectures by HF ``architectures[0]`` name, as lazy "module:attr" strings.

Plugins add architectures with the ``minisgl_register_models`` hook (the core's own come from
default_plugins/models.py); the scheduler process hands the collected registry to
``use_registry``, which is consulted first. Without one, BUILTIN_MODELS and ``register_model``.
"""

from __future__ import annotations

import importlib
from typing import Any

BUILTIN_MODELS: dict[str, str] = {
    "LlamaForCausalLM": "minisgl_core.engine.models.llama:LlamaForCausalLM",
    "Qwen2ForCausalLM": "minisgl_core.engine.models.qwen2:Qwen2ForCausalLM",
    "Qwen3ForCausalLM": "minisgl_core.engine.models.qwen3:Qwen3ForCausalLM",
}

_registry: dict[str, str | Any] = dict(BUILTIN_MODELS)
_plugins: Any = None  # registry.Registry of the plugins' models, once use_registry is called


def use_registry(registry: Any) -> None:
    """Look architectures up in ``registry`` (plugins.collect(...).models) before the built-in
    table: a plugin's model loads lazily, and one registered by two plugins is an error."""
    global _plugins
    _plugins = registry


def register_model(architecture: str, target: str | Any) -> None:
    """Map ``architecture`` to a model class or a "module:attr" string naming one."""
    _registry[architecture] = target


def registered_architectures() -> list[str]:
    """Every architecture name the engine can load."""
    return sorted({*_registry, *(_plugins.names() if _plugins is not None else ())})


def get_model_class(architecture: str) -> Any:
    """Import and return the class for ``architecture``; ValueError lists the known names."""
    if _plugins is not None and architecture in _plugins:
        return _plugins.get(architecture)  # DuplicateName / TargetLoadError name the plugins
    target = _registry.get(architecture)
    if target is None:
        known = ", ".join(registered_architectures())
        raise ValueError(f"unsupported model architecture {architecture!r} (supported: {known})")
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    return target
