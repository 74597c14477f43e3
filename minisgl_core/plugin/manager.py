"""The plugin manager class: pluggy's, remembering where each plugin came from and which failed."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType

import pluggy

from minisgl_core.plugin import hookspecs


class PluginLoadError(Exception):
    """A plugin failed to load or validate while ``MINISGL_STRICT_PLUGINS=1``."""


@dataclass(frozen=True)
class Origin:
    """Where a registered plugin came from, for listings and for rebuilding in other processes."""

    name: str
    module: str | None  # importable module name; None for objects registered in-process
    dist: str
    version: str
    source: str  # "default", "entrypoint" or "extra"


@dataclass(frozen=True)
class Broken:
    """A plugin that was skipped: why, and where it came from."""

    origin: Origin
    error: str


class MinisglPluginManager(pluggy.PluginManager):
    """pluggy's manager for the ``minisgl`` hooks, remembering each plugin's origin and failures."""

    def __init__(self, *, strict: bool = False) -> None:
        super().__init__("minisgl")
        self.add_hookspecs(hookspecs)
        self.strict = strict
        self.origins: dict[str, Origin] = {}
        self.broken: dict[str, Broken] = {}
        self.tracing = False  # MINISGL_TRACE_PLUGINS=1: every hook call on stderr

    def origin(self, name: str) -> Origin:
        """Where plugin ``name`` came from (plain ``register()`` calls count as "extra")."""
        if name in self.origins:
            return self.origins[name]
        plugin = self.get_plugin(name)
        module = plugin.__name__ if isinstance(plugin, ModuleType) else None
        return Origin(name, module, "-", "-", "extra")

    def mark_broken(self, origin: Origin, exc: BaseException, plugin: object = None) -> None:
        """Unregister ``plugin`` if it got registered, remember why, say so on stderr (or raise
        when strict)."""
        if plugin is not None and self.get_plugin(origin.name) is plugin:
            self.unregister(name=origin.name)
            self.origins.pop(origin.name, None)
        error = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, whatever exc says
        self.broken[origin.name] = Broken(origin, error)
        if self.strict:
            raise PluginLoadError(
                f"plugin {origin.name} ({origin.dist} {origin.version}) is broken: {error}"
            ) from exc
        print(
            f"minisgl: skipped plugin {origin.name} ({origin.dist} {origin.version}): {error}",
            file=sys.stderr,
        )
