"""The ``minisgl`` command: launch, plugins, config show, bench, and whatever plugins add."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.main

from minisgl_core import __version__
from minisgl_core.bench.compare import compare_command
from minisgl_core.bench.serve import serve_command
from minisgl_core.cli.common import (
    ConfigOpt,
    JsonOpt,
    Plugins,
    SetOpt,
    fail,
    lazy_entry,
    state,
)
from minisgl_core.cli.models import app as models_app
from minisgl_core.config.dump import to_json, to_toml
from minisgl_core.config.launch import ConfigError, LaunchConfig, load_config
from minisgl_core.plugin.listing import as_json, as_table, roles_table
from minisgl_core.plugin.loading import (
    MinisglPluginManager,
    PluginLoadError,
    build_manager,
    call_each,
)
from minisgl_core.plugin.registry import Registries, RegistryError


def _load(config: Path | None, flags: dict[str, Any], overrides: list[str] | None) -> LaunchConfig:
    try:
        return load_config(config, flags=flags, overrides=overrides or ())
    except ConfigError as exc:
        raise fail(str(exc)) from None


def validate(cfg: LaunchConfig, regs: Registries) -> None:
    """Raise RegistryError unless the selected transport, frontends and roles can be used."""
    for error, _owners in regs.conflicts():
        raise error
    regs.transports.get(cfg.transport)  # imports its target: a missing library shows up here
    for name in cfg.frontends:
        regs.frontends.check(name)
    for kind in regs.roles.kinds():
        regs.roles.check(kind, cfg.role_name(kind))
    for name in cfg.frontends:
        regs.frontends.get(name)
    for kind in regs.roles.kinds():
        regs.roles.get(kind, cfg.role_name(kind))


def launch(
    ctx: typer.Context,
    config: ConfigOpt = None,
    transport: Annotated[str | None, typer.Option(help="Transport between processes.")] = None,
    frontend: Annotated[
        list[str] | None, typer.Option(help="Frontend(s) to serve: openai, grpc or both (a,b).")
    ] = None,
    model: Annotated[str | None, typer.Option(
        help="Model: a directory, a .gguf file or a Hub id (ORG/NAME); unset: the default.")
    ] = None,
    revision: Annotated[str | None, typer.Option(
        help="Of a Hub model: a branch, tag or commit (default: main).")] = None,
    gguf_file: Annotated[str | None, typer.Option(
        help="Serve this GGUF file of the Hub repo (or directory) in --model.")] = None,
    served_model_name: Annotated[str | None, typer.Option(
        help="NAME[,ALIAS...]: the names clients use in `model` (the first is reported).")] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (OpenAI frontend).")] = None,
    grpc_port: Annotated[int | None, typer.Option(
        help="gRPC port: shorthand for -s frontends.grpc.port=P.")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32, float16 or bfloat16.")] = None,
    num_pages: Annotated[int | None, typer.Option(help="KV cache pages.")] = None,
    page_size: Annotated[int | None, typer.Option(help="Tokens per KV page.")] = None,
    max_seq_len_override: Annotated[int | None, typer.Option(help="Cap the context.")] = None,
    api_key: Annotated[str | None, typer.Option(help="Require this bearer token.")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel ranks.")] = None,
    tp_local_ranks: Annotated[str | None, typer.Option(
        help="Ranks started here, e.g. 0 (the rest: `minisgl tp-worker` elsewhere).")] = None,
    dist_addr: Annotated[str | None, typer.Option(
        help="Address rank 0 listens on for the other ranks.")] = None,
    dist_port: Annotated[int | None, typer.Option(
        help="Port rank 0 listens on for the other ranks (0: any free one).")] = None,
    cache: Annotated[
        str | None, typer.Option(help="KV prefix cache: radix (reuse shared prefixes) or naive.")
    ] = None,
    tokenizer: Annotated[str | None, typer.Option(
        help="Tokenizer role (default hf); options in [roles.tokenizer.NAME].")] = None,
    detokenizer: Annotated[str | None, typer.Option(
        help="Detokenizer role (default hf); options in [roles.detokenizer.NAME].")] = None,
    scheduler: Annotated[str | None, typer.Option(
        help="Scheduler role: continuous (the model) or synthetic (no model); options in "
             "[roles.scheduler.NAME].")] = None,
    quantization: Annotated[str | None, typer.Option(
        help="int8: int8 weights and per-token int8 inputs (LM head, q/k/v kept fp32).")] = None,
    reasoning_parser: Annotated[str | None, typer.Option(
        help="qwen3 or deepseek_r1: a chat answer's <think> block goes to reasoning_content."
    )] = None,
    set_: SetOpt = None,
) -> None:
    """Start the service: tokenizer, scheduler and detokenizer processes behind a frontend."""
    flags = {
        "transport": transport, "frontends": ",".join(frontend) if frontend else None,
        "model": model, "revision": revision, "gguf_file": gguf_file,
        "served_model_name": served_model_name, "host": host, "port": port,
        "dtype": dtype,
        "num_pages": num_pages, "page_size": page_size,
        "max_seq_len_override": max_seq_len_override, "api_key": api_key, "tp": tp,
        "tp_local_ranks": tp_local_ranks, "dist_addr": dist_addr, "dist_port": dist_port,
        "cache": cache, "tokenizer": tokenizer, "detokenizer": detokenizer,
        "scheduler": scheduler, "quantization": quantization,
        "reasoning_parser": reasoning_parser,
    }
    # a frontend's own flags are shorthands for its [frontends.<name>] table, below -s
    shorthands = [f"frontends.grpc.port={grpc_port}"] if grpc_port is not None else []
    cfg = _load(config, flags, [*shorthands, *(set_ or [])])
    try:
        validate(cfg, state(ctx).regs)
    except RegistryError as exc:
        raise fail(str(exc)) from None
    run = lazy_entry("minisgl_core.service.launcher:launch", "the service")
    raise typer.Exit(int(run(cfg, pm=state(ctx).pm) or 0))


def tp_worker(
    ctx: typer.Context,
    rank: Annotated[int, typer.Option(help="This process's rank (1..tp-1).")],
    tp: Annotated[int, typer.Option(help="Tensor-parallel ranks in all.")],
    dist_addr: Annotated[str, typer.Option(help="Rank 0's host (its --dist-addr).")],
    dist_port: Annotated[int, typer.Option(help="Rank 0's --dist-port.")],
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda (cuda:0) or cuda:N.")] = "cpu",
    num_threads: Annotated[int | None, typer.Option(help="Torch threads.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the other ranks.")] = 300.0,
) -> None:
    """Run one tensor-parallel rank > 0 for a `minisgl launch --tp N` on another host."""
    from minisgl_core.plugin.model_lookup import ModelNotFoundError, resolve

    try:  # the same plugins' resolvers and models as rank 0's host
        model = resolve(model, state(ctx).pm)
    except ModelNotFoundError as exc:
        raise fail(str(exc), 1) from None
    run = lazy_entry("minisgl_core.service.tp_worker:worker_command", "tensor parallelism")
    run(model.path, model.model_class, rank, tp, dist_addr, dist_port, device=device,
        num_threads=num_threads, timeout_s=timeout)


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


def config_show(config: ConfigOpt = None, set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Print the merged config (defaults < file < MINISGL_* env < -s) as TOML or JSON."""
    cfg = _load(config, {}, set_)
    if cfg.api_key:  # a secret: never printed where logs and terminals keep it
        cfg = dataclasses.replace(cfg, api_key="<redacted>")
    typer.echo(to_json(cfg) if json_ else to_toml(cfg), nl=json_)


def bench_transport(
    ctx: typer.Context,
    transport: Annotated[list[str] | None, typer.Option(help="Only these (repeat).")] = None,
    size: Annotated[list[int] | None, typer.Option(help="Message sizes in bytes (repeat).")] = None,
    json_: JsonOpt = False,
    duration: Annotated[float, typer.Option(help="Seconds per case.")] = 1.0,
) -> None:
    """Latency and throughput of every registered transport through the common interface."""
    for name in transport or []:
        try:
            state(ctx).regs.transports.check(name)
        except RegistryError as exc:
            raise fail(str(exc)) from None
    run = lazy_entry("minisgl_core.bench.transport:main", "the transport benchmark")
    run(transports=transport or None, sizes=size or None, json_lines=json_, duration=duration)


def bench_offline(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    batch_size: Annotated[list[int] | None, typer.Option(help="Batch sizes (repeat).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 64,
    tp: Annotated[int, typer.Option(
        min=1, help="Split the engine over N tensor-parallel ranks on this host.")] = 1,
    quantization: Annotated[list[str] | None, typer.Option(
        help="Engine weights: fp32 or int8 (repeat to run both, interleaved).")] = None,
    profile: Annotated[bool, typer.Option(
        help="Break one decode step into matmul / attention / other ops / Python.")] = False,
    ceilings: Annotated[bool, typer.Option(
        help="Measure the host's ceilings and report each figure as a share of them.")] = True,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per system; the best counts.")] = 3,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Offline engine throughput (no server) for a few batch sizes, against transformers."""
    chosen: list[str | None] = []
    for q in quantization or ["fp32"]:
        if q not in ("fp32", "none", "int8"):
            raise fail(f'--quantization must be fp32 or int8, got "{q}"')
        chosen.append(None if q in ("fp32", "none") else q)
    run = lazy_entry("minisgl_core.bench.engine_vs_hf:main", "the offline benchmark")
    run(model=model, batch_sizes=batch_size or [1, 8, 32], max_tokens=max_tokens, json_lines=json_,
        tp=tp, quantization=chosen, profile=profile, ceilings=ceilings, repeat=repeat,
        threads=threads)


def bench_quality(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    quantization: Annotated[list[str] | None, typer.Option(
        help="int8: measure it against fp32 (fp32 alone without).")] = None,
    tokens: Annotated[int, typer.Option(min=2, help="Tokens of text for the perplexity.")] = 4096,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Perplexity on pydoc_data.topics and greedy agreement with fp32; exit 1 if int8 misses
    its targets (perplexity within 3% of fp32's, "Paris" answered)."""
    chosen: list[str | None] = []
    for q in quantization or []:
        if q not in ("fp32", "none", "int8"):
            raise fail(f'--quantization must be fp32 or int8, got "{q}"')
        chosen.append(None if q in ("fp32", "none") else q)
    run = lazy_entry("minisgl_core.bench.quality:main", "the quality benchmark")
    raise typer.Exit(run(model=model, quantization=chosen, tokens=tokens, json_lines=json_,
                         threads=threads))


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
    app.command()(launch)
    app.command()(plugins)
    app.command("tp-worker")(tp_worker)
    config_app = typer.Typer(no_args_is_help=True, help="Inspect the configuration.")
    config_app.command("show")(config_show)
    app.add_typer(config_app, name="config")
    bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks.")
    bench_app.command("transport")(bench_transport)
    bench_app.command("offline")(bench_offline)
    bench_app.command("quality")(bench_quality)
    bench_app.command("serve")(serve_command)
    bench_app.command("compare")(compare_command)
    app.add_typer(bench_app, name="bench")
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
