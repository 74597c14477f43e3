"""The plugin manager: default plugins, entry points loaded one by one in isolation.

A plugin that fails to import or fails validation is skipped with one line on stderr and kept in
``pm.broken``; ``MINISGL_STRICT_PLUGINS=1`` makes that fatal. ``MINISGL_LOAD_PLUGINS`` is an
allow-list of entry-point or distribution names (empty = no third-party plugins at all);
``MINISGL_PLUGINS`` names extra plugin modules to load, packaged or not.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from minisgl_core.plugin import hookspecs
from minisgl_core.plugin.manager import Broken, MinisglPluginManager, Origin, PluginLoadError
from minisgl_core.plugin.registry import Registries, Registry
from minisgl_core.version import __version__

if TYPE_CHECKING:
    from minisgl_core.config.launch import LaunchConfig

ENTRY_POINT_GROUP = "minisgl"
CORE_DIST = "minisgl-core"

# The core's own plugins (minisgl_core/default_plugins/), by module name like entry points, and
# imported in this order before them; each shows up in ``minisgl plugins --all`` as
# "core.<last part>". Add a module here to make it a core plugin.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "minisgl_core.default_plugins.inproc",
    "minisgl_core.default_plugins.models",
    "minisgl_core.default_plugins.resolve",
    "minisgl_core.default_plugins.roles",
)


def strict_from_env() -> bool:
    return os.environ.get("MINISGL_STRICT_PLUGINS", "").strip().lower() in ("1", "true", "yes")


def allow_list_from_env() -> set[str] | None:
    """``MINISGL_LOAD_PLUGINS`` as a set of names, or None when unset (= load everything)."""
    raw = os.environ.get("MINISGL_LOAD_PLUGINS")
    if raw is None:
        return None
    return {_norm(n) for n in raw.split(",") if n.strip()}


def modules_from_env() -> list[str]:
    """``MINISGL_PLUGINS``: plugin modules to load by name, installed or not (comma-separated)."""
    return [m.strip() for m in os.environ.get("MINISGL_PLUGINS", "").split(",") if m.strip()]


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _origin_of(ep: metadata.EntryPoint, source: str) -> Origin:
    dist = ep.dist
    return Origin(
        name=ep.name,
        module=ep.module,
        dist=dist.name if dist is not None else "?",
        version=dist.version if dist is not None else "?",
        source=source,
    )


def _validate(pm: MinisglPluginManager, plugin: object, name: str) -> None:
    """pluggy's check_pending for one plugin: every hookimpl must match a known hook."""
    for caller in pm.get_hookcallers(plugin) or []:
        if caller.spec is None:
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not impl.optionalhook:
                    raise pluggy.PluginValidationError(
                        plugin, f"unknown hook {caller.name!r} in plugin {name}"
                    )


def register_plugin(pm: MinisglPluginManager, plugin: object, origin: Origin) -> bool:
    """Register and validate one plugin in isolation; False (and marked broken) on failure."""
    try:
        if pm.is_registered(plugin):
            return True  # the same module reached us twice (entry point and extra): once is enough
        if pm.has_plugin(origin.name):
            other = pm.origin(origin.name)
            raise ValueError(f"the name {origin.name} is taken by {other.module or 'an object'} "
                             f"({other.dist} {other.version})")
        pm.register(plugin, name=origin.name)
        _validate(pm, plugin, origin.name)
    except Exception as exc:
        pm.mark_broken(origin, exc, plugin)
        return False
    pm.origins[origin.name] = origin
    return True


def _load_module(pm: MinisglPluginManager, module: str, origin: Origin) -> None:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        pm.mark_broken(origin, exc)
        return
    register_plugin(pm, mod, origin)


def build_manager(
    *, autoload: bool = True, extra: Sequence[str | object] = (), strict: bool | None = None
) -> MinisglPluginManager:
    """Build a manager: default plugins, then entry points (unless ``autoload`` is False or the
    allow-list says otherwise), then the ``MINISGL_PLUGINS`` modules (with ``autoload``), then
    ``extra`` modules (by name) or objects.

    Spawned processes call ``build_manager(autoload=False, extra=loaded_module_names(parent))``
    to get the same plugins under the same names.
    """
    pm = MinisglPluginManager(strict=strict_from_env() if strict is None else strict)
    if autoload:
        extra = [*modules_from_env(), *extra]
    for module in DEFAULT_PLUGINS:
        short = module.rsplit(".", 1)[-1]
        _load_module(pm, module, Origin(f"core.{short}", module, CORE_DIST, __version__, "default"))

    eps = _entry_points() if autoload or any(isinstance(e, str) for e in extra) else []
    if autoload:
        allow = allow_list_from_env()
        for ep in eps:
            origin = _origin_of(ep, "entrypoint")
            if allow is not None and not {_norm(ep.name), _norm(origin.dist)} & allow:
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                pm.mark_broken(origin, exc)
                continue
            register_plugin(pm, plugin, origin)

    by_module = {ep.module: ep for ep in eps}
    for item in extra:
        if isinstance(item, str):
            ep = by_module.get(item)
            if ep is not None:
                origin = _origin_of(ep, "extra")
            else:
                origin = Origin(item, item, "-", "-", "extra")
            if origin.name not in pm.origins or pm.origins[origin.name].module != item:
                _load_module(pm, item, origin)
        else:
            name = getattr(item, "__name__", None) or type(item).__name__
            if pm.has_plugin(name):
                name = f"{name}-{id(item):x}"
            register_plugin(pm, item, Origin(name, None, "-", "-", "extra"))

    if os.environ.get("MINISGL_TRACE_PLUGINS"):
        pm.tracing = True
        pm.add_hookcall_monitoring(_trace_before, _trace_after)
    return pm


def _trace_before(hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    owners = ", ".join(impl.plugin_name for impl in impls) or "-"
    print(f"minisgl: hook {hook_name}({', '.join(kwargs)}) -> {owners}", file=sys.stderr)


def _trace_after(outcome: Any, hook_name: str, impls: Sequence[Any], kwargs: Any) -> None:
    if outcome.exception is not None:
        print(f"minisgl: hook {hook_name} raised {outcome.exception!r}", file=sys.stderr)
    elif outcome.get_result() not in (None, []):
        print(f"minisgl: hook {hook_name} returned {outcome.get_result()!r}", file=sys.stderr)


def loaded_module_names(pm: pluggy.PluginManager) -> list[str]:
    """Module names of the non-default plugins registered in ``pm`` (for spawned processes).

    Plugins registered as objects cannot cross a process boundary and are left out.
    """
    origins: dict[str, Origin] = getattr(pm, "origins", {})
    out = []
    for name, plugin in pm.list_name_plugin():
        origin = origins.get(name)
        if origin is not None and origin.source == "default":
            continue
        if origin is not None and origin.module:
            out.append(origin.module)
        elif isinstance(plugin, ModuleType):
            out.append(plugin.__name__)
    return out


def configure(pm: pluggy.PluginManager, config: LaunchConfig, process: str) -> None:
    """Typed call of ``minisgl_configure`` in ``process``."""
    pm.hook.minisgl_configure(config=config, process=process)


def unconfigure(pm: pluggy.PluginManager, config: LaunchConfig, process: str) -> None:
    """Typed call of ``minisgl_unconfigure`` in ``process``."""
    pm.hook.minisgl_unconfigure(config=config, process=process)


@dataclass
class Call:
    """The outcome of calling one hook impl by impl: which plugins failed, with what."""

    failed: dict[str, BaseException] = field(default_factory=dict)


def call_each(
    pm: pluggy.PluginManager, hook_name: str, make_kwargs: Any, after: Any = None
) -> Call:
    """Call every impl of ``hook_name`` on its own, ``make_kwargs(owner)`` giving its arguments;
    ``after(owner, kwargs)``, if given, runs next and may raise to reject what the impl did.

    An impl that raises marks its plugin broken (unregistered, one stderr line; raises under
    strict mode) without stopping the others.
    """
    outcome = Call()
    caller = getattr(pm.hook, hook_name)
    for impl in caller.get_hookimpls():  # registration order: core first, then entry points
        owner = impl.plugin_name
        if pm.get_plugin(owner) is None:
            continue  # marked broken by an earlier impl in this loop
        try:
            if impl.hookwrapper or impl.wrapper:
                raise pluggy.PluginValidationError(impl.plugin, f"{hook_name} cannot be a wrapper")
            kwargs = make_kwargs(owner)
            if getattr(pm, "tracing", False):
                print(f"minisgl: hook {hook_name}({', '.join(impl.argnames)}) -> {owner}",
                      file=sys.stderr)
            impl.function(**{k: kwargs[k] for k in impl.argnames})
            if after is not None:
                after(owner, kwargs)
        except Exception as exc:
            outcome.failed[owner] = exc
            if isinstance(pm, MinisglPluginManager):
                pm.mark_broken(pm.origin(owner), exc, impl.plugin)
            else:
                raise
    return outcome


def _register_into(reg: Registry[Any]) -> Any:
    def make_kwargs(owner: str) -> dict[str, Any]:
        def register(name: str, target: Any, *, default: bool = False) -> None:
            reg.add(name, target, owner, default=default)

        return {"register": register}

    return make_kwargs


def collect(pm: pluggy.PluginManager) -> Registries:
    """Call every ``minisgl_register_*`` hook impl by impl and return the filled registries.

    Each name remembers the plugin that registered it. A plugin whose hook raises (or registers
    something malformed) loses all its registrations and is marked broken.
    """
    regs = Registries.empty(hookspecs.ROLE_KINDS)

    def roles_kwargs(owner: str) -> dict[str, Any]:
        def register(kind: str, name: str, target: Any) -> None:
            regs.roles.add(kind, name, target, owner)

        return {"register": register}

    hooks = [
        ("minisgl_register_transports", _register_into(regs.transports)),
        ("minisgl_register_frontends", _register_into(regs.frontends)),
        ("minisgl_register_roles", roles_kwargs),
        ("minisgl_register_models", _register_into(regs.models)),
    ]
    for hook_name, make_kwargs in hooks:
        for owner in call_each(pm, hook_name, make_kwargs).failed:
            regs.drop_owner(owner)
    return regs


__all__ = ["CORE_DIST", "DEFAULT_PLUGINS", "ENTRY_POINT_GROUP", "Broken", "Call",
           "MinisglPluginManager", "Origin", "PluginLoadError", "build_manager", "call_each",
           "collect", "configure", "loaded_module_names", "register_plugin", "unconfigure"]
