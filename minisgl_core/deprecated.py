"""Old import paths of moved names: each keeps working until REMOVED_IN, with a DeprecationWarning
naming the new path (docs/plugins.md, "What is public, and how long a moved name lives").

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
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

REMOVED_IN = "0.3"

# old module path -> the module its names live in now (the re-layout of 0.1 into packages, then
# the knots it left)
MOVED_MODULES: dict[str, str] = {
    "minisgl_core.messages": "minisgl_core.wire.schema",
    "minisgl_core.codec": "minisgl_core.wire.codec",
    "minisgl_core.hookspecs": "minisgl_core.plugin.hookspecs",
    "minisgl_core.plugins": "minisgl_core.plugin.loading",
    "minisgl_core.plugin_manager": "minisgl_core.plugin.manager",
    "minisgl_core.registry": "minisgl_core.plugin.registry",
    "minisgl_core.plugin_listing": "minisgl_core.plugin.listing",
    "minisgl_core.model_lookup": "minisgl_core.plugin.model_lookup",
    "minisgl_core.transport_util": "minisgl_core.plugin.transport_util",
    "minisgl_core.wire.transport_util": "minisgl_core.plugin.transport_util",
    "minisgl_core.client": "minisgl_core.engine_client",
    "minisgl_core.launcher": "minisgl_core.service.launcher",
    "minisgl_core.launch_serve": "minisgl_core.service.serve",
    "minisgl_core.rundir": "minisgl_core.service.rundir",
    "minisgl_core.ports": "minisgl_core.service.ports",
    "minisgl_core.runtime": "minisgl_core.service",
    "minisgl_core.runtime.client": "minisgl_core.service.transport_client",
    "minisgl_core.runtime.roles": "minisgl_core.service.roles",
    "minisgl_core.runtime.scheduler": "minisgl_core.service.scheduler_loop",
    "minisgl_core.runtime.spec": "minisgl_core.service.spec",
    "minisgl_core.runtime.text_loops": "minisgl_core.service.text_loops",
    "minisgl_core.runtime.worker": "minisgl_core.service.worker",
    "minisgl_core.config": "minisgl_core.config.launch",  # a package now: config/__init__.py
    "minisgl_core.config_roles": "minisgl_core.config.roles",
    "minisgl_core.config_dump": "minisgl_core.config.dump",
    "minisgl_core.cli": "minisgl_core.cli.app",  # a package now: cli/__init__.py
    "minisgl_core.cli_common": "minisgl_core.cli.common",
    "minisgl_core.engine.llm": "minisgl_core.offline",
    "minisgl_core.engine.bench": "minisgl_core.bench.engine_vs_hf",
    "minisgl_core.engine.bench_prefix": "minisgl_core.bench.prefix_cache",
    "minisgl_core.engine.tp_local": "minisgl_core.service.tp_local",
    "minisgl_core.engine.scheduler": "minisgl_core.engine.batching",
    "minisgl_core.engine.convert": "minisgl_core.store.convert",  # the model store's package
    # the kernels left the engine for a package of their own (minisgl_core/kernels/)
    "minisgl_core.engine.linear": "minisgl_core.kernels",
    "minisgl_core.engine.kernel_choice": "minisgl_core.kernels.matmul.choice",
    "minisgl_core.engine.quant": "minisgl_core.kernels.matmul.w8a8",
    "minisgl_core.engine.wo_quant": "minisgl_core.kernels.matmul.weight_only",
    "minisgl_core.engine.amx_hf": "minisgl_core.kernels.matmul.amx",
    "minisgl_core.engine.native": "minisgl_core.kernels.native.library",
    "minisgl_core.engine.native_ops": "minisgl_core.kernels.native.ops",
    "minisgl_core.engine.native_attention": "minisgl_core.kernels.attention",
    "minisgl_core.engine.compiled_ops": "minisgl_core.kernels.ops",
}

# "old.module:Name" -> "new.module:NewName"; wins over MOVED_MODULES for that name
MOVED_NAMES: dict[str, str] = {
    "minisgl_core.default_plugins:DEFAULT_PLUGINS": "minisgl_core.plugin.loading:DEFAULT_PLUGINS",
    "minisgl_core.engine.scheduler:Scheduler": "minisgl_core.engine.batching:Batcher",
    "minisgl_core.config.launch:load_config": "minisgl_core.config.sources:load_config",
    "minisgl_core.config.launch:read_toml": "minisgl_core.config.sources:read_toml",
    "minisgl_core.config.launch:ENV_PREFIX": "minisgl_core.config.sources:ENV_PREFIX",
    "minisgl_core.config.launch:Merged": "minisgl_core.config.merge:Merged",
    "minisgl_core.service.spec:RoleName": "minisgl_core.interfaces:RoleKind",
    "minisgl_core.runtime.spec:RoleName": "minisgl_core.interfaces:RoleKind",
    "minisgl_core.launcher:STOP_GRACE_S": "minisgl_core.service.running:STOP_GRACE_S",
    "minisgl_core.config:load_config": "minisgl_core.config.sources:load_config",
    "minisgl_core.config:read_toml": "minisgl_core.config.sources:read_toml",
    "minisgl_core.config:ENV_PREFIX": "minisgl_core.config.sources:ENV_PREFIX",
    "minisgl_core.cli:validate": "minisgl_core.cli.launch_commands:validate",
    "minisgl_core.cli:launch": "minisgl_core.cli.launch_commands:launch",
    "minisgl_core.cli:tp_worker": "minisgl_core.cli.launch_commands:tp_worker",
    "minisgl_core.cli:bench_transport": "minisgl_core.cli.bench_commands:bench_transport",
    "minisgl_core.cli:bench_offline": "minisgl_core.cli.bench_commands:bench_offline",
    "minisgl_core.cli:bench_quality": "minisgl_core.cli.bench_commands:bench_quality",
    # the model store left the engine (engine/ is the compute only)
    "minisgl_core.engine.weights:DEFAULT_PACKAGE":
        "minisgl_core.store.default_model:DEFAULT_PACKAGE",
    "minisgl_core.engine.weights:DEFAULT_MODULE": "minisgl_core.store.default_model:DEFAULT_MODULE",
    "minisgl_core.engine.weights:find_default_gguf":
        "minisgl_core.store.default_model:find_default_gguf",
    "minisgl_core.engine.weights:ensure_default_model":
        "minisgl_core.store.default_model:ensure_default_model",
    "minisgl_core.engine.weights:DEFAULT_NAME": "minisgl_core.store.naming:DEFAULT_NAME",
    "minisgl_core.engine.weights:MARKER": "minisgl_core.store.naming:MARKER",
    "minisgl_core.engine.weights:model_name_of": "minisgl_core.store.naming:model_name_of",
    "minisgl_core.engine.compiled_ops:new_handle": "minisgl_core.kernels.handles:new_handle",
    "minisgl_core.engine.compiled_ops:linear_out_features":
        "minisgl_core.kernels.handles:linear_out_features",
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
    api = importlib.import_module(PUBLIC_MODULE)
    if name in api.__all__ and getattr(api, name) is value:
        return f"{PUBLIC_MODULE}.{name}"
    return f"{module}.{name}"


def _is_submodule(package: str, name: str) -> bool:
    """``from package import name`` of a submodule asks for the attribute first: let the import
    system find the submodule instead of forwarding the name."""
    module = sys.modules.get(package)
    if getattr(module, "__path__", None) is None:
        return False
    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except (ImportError, ValueError):
        return False


def resolve(old_module: str, name: str, stacklevel: int = 3) -> Any:
    """The object ``old_module.name`` now is, after a DeprecationWarning naming its new path;
    AttributeError when that name never moved (so ``hasattr`` and ``dir`` behave)."""
    where = None if name.startswith("__") else new_path(old_module, name)
    missing = AttributeError(f"module {old_module!r} has no attribute {name!r}")
    if where is None or _is_submodule(old_module, name):
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
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of MOVED_MODULES; consulted after the real finders found nothing."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        # an old package (minisgl_core.runtime): its old submodules are found here too
        is_package = any(old.startswith(fullname + ".") for old in MOVED_MODULES)
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=is_package)


def install() -> None:
    """Let the old module paths import (once per process; ``import minisgl_core`` calls it)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
