"""What every `minisgl` command shares: the plugins (built on first need), errors, options."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from minisgl_core.config.launch import ConfigError, LaunchConfig
from minisgl_core.config.sources import load_config
from minisgl_core.plugin.listing import PluginRow, describe
from minisgl_core.plugin.loading import MinisglPluginManager, build_manager, collect
from minisgl_core.plugin.registry import Registries

EXIT_USAGE = 2  # bad names, bad config: nothing was started


class Plugins:
    """The plugin manager and registries one invocation uses, built on first need."""

    def __init__(self, pm: MinisglPluginManager | None = None) -> None:
        self._pm = pm
        self._regs: Registries | None = None

    @property
    def pm(self) -> MinisglPluginManager:
        if self._pm is None:
            self._pm = build_manager()
        return self._pm

    @property
    def regs(self) -> Registries:
        if self._regs is None:
            self._regs = collect(self.pm)
        return self._regs

    def rows(self, *, all: bool = False) -> list[PluginRow]:
        return describe(self.pm, self.regs, all=all)


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print ``minisgl: error: message`` on stderr and return the Exit to raise."""
    typer.echo(f"minisgl: error: {message}", err=True)
    return typer.Exit(code)


def load(config: Path | None, flags: dict[str, Any], overrides: list[str] | None) -> LaunchConfig:
    """The merged launch config; a bad setting exits 2 with its message."""
    try:
        return load_config(config, flags=flags, overrides=overrides or ())
    except ConfigError as exc:
        raise fail(str(exc)) from None


def lazy_entry(target: str, what: str) -> Callable[..., Any]:
    """Import ``"module:attr"``; exit 1 with a clear message if ``module`` is not there yet."""
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise fail(f"{what} is not available yet ({module} is missing)", 1) from None
        raise


def state(ctx: typer.Context) -> Plugins:
    """The invocation's Plugins (made here when a command runs without the root callback)."""
    obj = ctx.find_object(Plugins)
    if obj is None:  # a command invoked without the root callback (plugin tests)
        obj = ctx.ensure_object(Plugins)
    return obj


ConfigOpt = Annotated[
    Path | None,
    typer.Option("-c", "--config", envvar="MINISGL_CONFIG", help="TOML config file."),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("-s", "--set", metavar="KEY=VALUE", help="Override any key, e.g. -s port=9000."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
