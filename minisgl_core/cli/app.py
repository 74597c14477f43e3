"""The ``minisgl`` command: launch, plugins, config show, bench, and whatever plugins add."""

from __future__ import annotations

import dataclasses
import sys
from typing import Annotated, Any

import typer
import typer.main

from minisgl_core.cli import bench_commands, launch_commands, worker_commands
from minisgl_core.cli.common import ConfigOpt, JsonOpt, Plugins, SetOpt, load, state
from minisgl_core.cli.keys import keys_app
from minisgl_core.cli.models import app as models_app
from minisgl_core.config.dump import to_json, to_toml
from minisgl_core.plugin.listing import as_json, as_table, roles_table
from minisgl_core.plugin.loading import (
    MinisglPluginManager,
    PluginLoadError,
    build_manager,
    call_each,
)
from minisgl_core.version import __version__


def plugins(
    ctx: typer.Context,
    json_: JsonOpt = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 if any plugin is broken.")] = False,
    all_: Annotated[bool, typer.Option("--all", help="List the core's parts one by one.")] = False,
    hook: Annotated[str | None, typer.Option(help="Only plugins implementing this hook.")] = None,
) -> None:
    """List installed plugins: distribution, version, what each provides, status."""
    rows = state(ctx).rows(all=all_)
    if hook:
        wanted = hook if hook.startswith("minisgl_") else f"minisgl_{hook}"
        rows = [r for r in rows if wanted in r.hooks]
    if json_:
        typer.echo(as_json(rows))
    else:
        typer.echo(as_table(rows))
        if not hook:  # the roles --tokenizer, --detokenizer and --scheduler choose from
            typer.echo("\n" + roles_table(state(ctx).regs))
    if check and any(r.status != "ok" for r in rows):
        raise typer.Exit(1)


def config_show(ctx: typer.Context, config: ConfigOpt = None, set_: SetOpt = None,
                json_: JsonOpt = False) -> None:
    """Print the merged config (defaults < file < MINISGL_* env < -s) as TOML or JSON."""
    cfg = load(config, {}, set_)
    try:  # the transport and frontends the installed plugins offer when the config names none
        cfg = state(ctx).regs.with_defaults(cfg)
    except LookupError:
        pass  # none offered: shown unset, and `minisgl launch` says what to name
    tables = {name: {**table, "api_key": "<redacted>"} if table.get("api_key") else table
              for name, table in cfg.frontends_options.items()}
    cfg = dataclasses.replace(cfg, frontends_options=tables)  # a secret: never printed
    typer.echo(to_json(cfg) if json_ else to_toml(cfg), nl=json_)


def _version_text(state: Plugins) -> str:
    lines = [f"minisgl {__version__}"]
    for r in state.rows():
        status = "" if r.status == "ok" else f"  [{r.status}]"
        lines.append(f"  {r.name} ({r.dist} {r.version}){status}")
    return "\n".join(lines)


def _command_names(app: typer.Typer) -> set[str]:
    group = typer.main.get_command(app)
    return set(getattr(group, "commands", {}))


def add_plugin_commands(app: typer.Typer, state: Plugins) -> None:
    """Let each plugin add commands in isolation: one whose hook raises, whose commands cannot be
    built, or that reuses a taken name is marked broken and leaves ``app`` as it was."""
    taken = _command_names(app)

    def stage(owner: str) -> dict[str, Any]:
        scratch = typer.Typer()
        scratch.callback()(_group_marker)  # a group even with one command, so names show
        return {"app": scratch}

    def commit(owner: str, kwargs: dict[str, Any]) -> None:
        scratch: typer.Typer = kwargs["app"]
        names = _command_names(scratch)  # raises if a command cannot be built
        clash = names & taken
        if clash:
            raise ValueError(f"command {', '.join(sorted(clash))} already exists")
        app.registered_commands.extend(scratch.registered_commands)
        app.registered_groups.extend(scratch.registered_groups)
        taken.update(names)

    call_each(state.pm, "minisgl_register_commands", stage, after=commit)


def _group_marker() -> None:
    """Plugin commands."""


def _show_version(ctx: typer.Context, value: bool) -> None:
    if value:
        typer.echo(_version_text(state(ctx)))
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True,
                     help="Show the versions of minisgl and its plugins."),
    ] = False,
) -> None:
    """minisgl: a small, fast, plugin-based LLM server."""


def make_app(
    pm: MinisglPluginManager | None = None, *, plugin_commands: bool = True
) -> typer.Typer:
    """Build the ``minisgl`` app around ``pm`` (built on first need when None)."""
    state = Plugins(pm)
    app = typer.Typer(
        name="minisgl", no_args_is_help=True, add_completion=False,
        pretty_exceptions_enable=False, help="minisgl: a small, fast, plugin-based LLM server.",
        context_settings={"obj": state},  # every command finds the manager as ctx.obj
    )

    app.callback()(_root)
    app.command()(launch_commands.launch)
    app.command()(plugins)
    app.command("tp-worker")(launch_commands.tp_worker)
    app.command("worker")(worker_commands.worker)
    config_app = typer.Typer(no_args_is_help=True, help="Inspect the configuration.")
    config_app.command("show")(config_show)
    app.add_typer(config_app, name="config")
    app.add_typer(bench_commands.bench_app(), name="bench")
    app.add_typer(keys_app, name="keys")
    app.add_typer(models_app, name="models")
    if plugin_commands:
        add_plugin_commands(app, state)
    return app


def main(argv: list[str] | None = None) -> None:
    """Console script ``minisgl``: build the plugin manager first, so plugin commands exist."""
    try:
        app = make_app(build_manager())
    except PluginLoadError as exc:  # MINISGL_STRICT_PLUGINS=1 and a plugin is broken
        typer.echo(f"minisgl: error: {exc}", err=True)
        sys.exit(1)
    app(args=argv, prog_name="minisgl")
