"""Old import paths of moved names: each keeps working until REMOVED_IN, with a DeprecationWarning
naming the new path (docs/plugins.md, "What is public and how long a moved name lives").

Two tables say everything: ``MOVED_MODULES`` (a module that moved whole: its old path still
imports, as a stub whose attributes come from the new module) and ``MOVED_NAMES`` (one name that
left a module, or changed its name). A module that still exists but lost names forwards them with
``__getattr__ = deprecated.forwarder(__name__)``. Only ``importlib`` reaches the new modules, so
the layering contracts see no import from an old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

REMOVED_IN = "0.3"

# old module path -> the module its names live in now
MOVED_MODULES: dict[str, str] = {
    "minisgl_core.engine.scheduler": "minisgl_core.engine.batching",
}

# "old.module:Name" -> "new.module:NewName"; wins over MOVED_MODULES for that name
MOVED_NAMES: dict[str, str] = {
    "minisgl_core.default_plugins:DEFAULT_PLUGINS": "minisgl_core.plugin.loading:DEFAULT_PLUGINS",
    "minisgl_core.engine.scheduler:Scheduler": "minisgl_core.engine.batching:Batcher",
    "minisgl_core.config.launch:load_config": "minisgl_core.config.sources:load_config",
    "minisgl_core.config.launch:read_toml": "minisgl_core.config.sources:read_toml",
    "minisgl_core.config.launch:ENV_PREFIX": "minisgl_core.config.sources:ENV_PREFIX",
}

PUBLIC_MODULE = "minisgl_core.api"  # where a moved public name is best imported from


def new_path(old_module: str, name: str) -> tuple[str, str] | None:
    """(module, name) that ``old_module.name`` moved to, or None if it did not move."""
    target = MOVED_NAMES.get(f"{old_module}:{name}")
    if target is not None:
        module, _, new_name = target.partition(":")
        return module, new_name
    if old_module in MOVED_MODULES:
        return MOVED_MODULES[old_module], name
    return None


def _advice(module: str, name: str, value: object) -> str:
    """The path to name in the warning: the public API's when it holds the same object."""
    try:
        api = importlib.import_module(PUBLIC_MODULE)
    except ModuleNotFoundError:
        return f"{module}.{name}"
    if name in getattr(api, "__all__", ()) and getattr(api, name, None) is value:
        return f"{PUBLIC_MODULE}.{name}"
    return f"{module}.{name}"


def resolve(old_module: str, name: str, stacklevel: int = 3) -> Any:
    """The object ``old_module.name`` now is, after a DeprecationWarning naming its new path;
    AttributeError when that name never moved (so ``hasattr`` and ``dir`` behave)."""
    where = None if name.startswith("__") else new_path(old_module, name)
    missing = AttributeError(f"module {old_module!r} has no attribute {name!r}")
    if where is None:
        raise missing
    module, new_name = where
    try:
        value = getattr(importlib.import_module(module), new_name)
    except AttributeError:
        raise missing from None
    warnings.warn(f"{old_module}.{name} is deprecated and goes away in minisgl {REMOVED_IN}: "
                  f"use {_advice(module, new_name, value)}", DeprecationWarning,
                  stacklevel=stacklevel)
    return value


def forwarder(old_module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that hands out the names which left ``old_module``."""

    def __getattr__(name: str) -> Any:
        return resolve(old_module, name)

    return __getattr__


class _StubLoader(importlib.abc.Loader):
    """Makes the module at an old path: no code of its own, every attribute forwarded."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, f"Deprecated: moved to {MOVED_MODULES[spec.name]}.")
        module.__getattr__ = forwarder(spec.name)  # type: ignore[method-assign]
        if any(old.startswith(spec.name + ".") for old in MOVED_MODULES):
            module.__path__ = []  # an old package: its old submodules import through us too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of MOVED_MODULES; consulted after the real finders found nothing."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        is_package = any(old.startswith(fullname + ".") for old in MOVED_MODULES)
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=is_package)


def install() -> None:
    """Let the old module paths import (once per process; ``import minisgl_core`` calls it)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
