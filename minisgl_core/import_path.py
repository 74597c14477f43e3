"""Objects named by a ``"package.module:attr.sub"`` path: plugin targets, and the model class a
compile child process rebuilds."""

from __future__ import annotations

import importlib
from typing import Any


def load_target(spec: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute."""
    module_name, _, attr_path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


__all__ = ["load_target"]
