"""Model architectures by HF ``architectures[0]`` name, as lazy "module:attr" strings.

The ``minisgl_register_models`` hook feeds the same table (see default_plugins/models.py);
until a plugin manager calls it, the engine falls back to BUILTIN_MODELS.
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


def register_model(architecture: str, target: str | Any) -> None:
    """Map ``architecture`` to a model class or a "module:attr" string naming one."""
    _registry[architecture] = target


def registered_architectures() -> list[str]:
    """Every architecture name the engine can load."""
    return sorted(_registry)


def get_model_class(architecture: str) -> Any:
    """Import and return the class for ``architecture``; ValueError lists the known names."""
    target = _registry.get(architecture)
    if target is None:
        known = ", ".join(registered_architectures())
        raise ValueError(f"unsupported model architecture {architecture!r} (supported: {known})")
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    return target
