"""``minisgl launch`` (the service) and ``minisgl tp-worker`` (a tensor-parallel rank elsewhere)."""

from __future__ import annotations

from typing import Annotated

import typer

from minisgl_core.cli.common import ConfigOpt, SetOpt, fail, lazy_entry, load, state
from minisgl_core.config.launch import LaunchConfig
from minisgl_core.plugin.registry import Registries, RegistryError


def validate(cfg: LaunchConfig, regs: Registries) -> None:
    """Raise RegistryError unless the selected transport, frontends and roles (``cfg`` with its
    defaults chosen, ``Registries.with_defaults``) can be used, and
    ValueError for a frontend options table its frontend refuses (before any worker starts)."""
    for error, _owners in regs.conflicts():
        raise error
    regs.transports.get(cfg.transport)  # imports its target: a missing library shows up here
    for name in cfg.frontends:
        regs.frontends.check(name)
    for kind in regs.roles.kinds():
        regs.roles.check(kind, cfg.role_name(kind))
    for name in cfg.frontends:
        check_options = getattr(regs.frontends.get(name), "check_options", None)
        if check_options is not None:  # a frontend declares its options, defaults and checks
            check_options(cfg.frontend_table(name))
    for kind in regs.roles.kinds():
        regs.roles.get(kind, cfg.role_name(kind))


def launch(
    ctx: typer.Context,
    config: ConfigOpt = None,
    transport: Annotated[str | None, typer.Option(
        help="Transport between processes (default: the installed plugins' default, zmq).")
    ] = None,
    frontend: Annotated[list[str] | None, typer.Option(
        help="Frontend(s) to serve: openai, grpc or both (a,b); default: the installed "
             "plugins' default, openai.")] = None,
    model: Annotated[str | None, typer.Option(
        help="Model: a directory, a .gguf file or a Hub id (ORG/NAME); unset: the default.")
    ] = None,
    revision: Annotated[str | None, typer.Option(
        help="Of a Hub model: a branch, tag or commit (default: main).")] = None,
    gguf_file: Annotated[str | None, typer.Option(
        help="Serve this GGUF file of the Hub repo (or directory) in --model.")] = None,
    served_model_name: Annotated[str | None, typer.Option(
        help="NAME[,ALIAS...]: the names clients use in `model` (the first is reported).")] = None,
    host: Annotated[str | None, typer.Option(
        help="Address every frontend listens on: shorthand for -s frontends.NAME.host=H.")] = None,
    port: Annotated[int | None, typer.Option(
        help="OpenAI (HTTP) port: shorthand for -s frontends.openai.port=P.")] = None,
    grpc_port: Annotated[int | None, typer.Option(
        help="gRPC port: shorthand for -s frontends.grpc.port=P.")] = None,
    dtype: Annotated[str | None, typer.Option(
        help="float32, float16, bfloat16 or auto (bf16 where it measures faster).")] = None,
    num_pages: Annotated[int | None, typer.Option(help="KV cache pages.")] = None,
    page_size: Annotated[int | None, typer.Option(help="Tokens per KV page.")] = None,
    max_seq_len_override: Annotated[int | None, typer.Option(help="Cap the context.")] = None,
    api_key: Annotated[str | None, typer.Option(
        help="Require this bearer token on every frontend (frontends.NAME.api_key).")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel ranks.")] = None,
    dp: Annotated[int | None, typer.Option(
        help="Data-parallel scheduler replicas, each its own process (--tp ranks each).")] = None,
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
        help="auto (default): a GGUF in its own weight format (Q4_0/Q4_1/Q4_K as int4, Q5/Q6/Q8 "
             "as int8-wo, F16 unquantized), anything else unquantized; none: never quantize; "
             "int8: int8 weights and per-token int8 inputs (LM head, q/k/v kept unquantized); "
             "int8-wo: int8 weights only; int4: 4-bit weights in groups of 32 (ggml's Q4_1).")
    ] = None,
    reasoning_parser: Annotated[str | None, typer.Option(
        help="qwen3 or deepseek_r1: a chat answer's <think> block goes to reasoning_content."
    )] = None,
    tool_call_parser: Annotated[str | None, typer.Option(
        help="hermes, llama3_json, mistral or qwen3_coder: the format of the model's tool calls "
             "(default: read from its chat template).")] = None,
    remote: Annotated[str | None, typer.Option(
        help="A role run by `minisgl worker` on another host: scheduler, tokenizer or "
             "detokenizer (tcp endpoints; docs/transports.md).")] = None,
    remote_address: Annotated[str | None, typer.Option(
        help="Where that worker connects (tcp://HOST:PORT); default: a port of the range.")
    ] = None,
    remote_wait: Annotated[float, typer.Option(
        help="Seconds to wait for the remote worker to join again after it is gone (503 "
             "meanwhile); 0: stop the service, exit code 1.")] = 0.0,
    speculative: Annotated[str | None, typer.Option(
        help="ngram: prompt-lookup speculation (-s num_speculative_tokens=K, "
             "prompt_lookup_min/max=N).")] = None,
    compile_: Annotated[bool | None, typer.Option(
        "--compile/--no-compile",
        help="Decode steps as torch.compile'd graphs. Default: on where the configuration "
             "has them; the first start compiles them in the background (eager meanwhile), "
             "later starts load them from the cache before serving.")] = None,
    deterministic: Annotated[bool | None, typer.Option(
        "--deterministic/--no-deterministic",
        help="Batch-invariant kernels: a request's tokens do not depend on the other requests, "
             "prefill chunking, --speculative or --compile (slower; docs/speculative.md).")
    ] = None,
    prefix_cache_dir: Annotated[str | None, typer.Option(
        help="Keep full KV pages of cached prefixes in this directory too (off by default); "
             "they survive restarts.")] = None,
    prefix_cache_disk_gb: Annotated[float | None, typer.Option(
        help="Size budget of --prefix-cache-dir in GB (default 10).")] = None,
    load_format: Annotated[str | None, typer.Option(
        help="auto (the model's safetensors) or dummy (random weights from its config.json, "
             "for benchmarks at a model's shapes).")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(
        help="auto (the model's dtype) or int8: KV pages as int8 with a scale per token and "
             "head, about half bf16's bytes.")] = None,
    set_: SetOpt = None,
) -> None:
    """Start the service: tokenizer, scheduler and detokenizer processes behind a frontend."""
    flags = {
        "transport": transport, "frontends": ",".join(frontend) if frontend else None,
        "model": model, "revision": revision, "gguf_file": gguf_file,
        "served_model_name": served_model_name, "host": host, "port": port,
        "dtype": dtype,
        "num_pages": num_pages, "page_size": page_size,
        "max_seq_len_override": max_seq_len_override, "api_key": api_key, "tp": tp, "dp": dp,
        "tp_local_ranks": tp_local_ranks, "dist_addr": dist_addr, "dist_port": dist_port,
        "cache": cache, "tokenizer": tokenizer, "detokenizer": detokenizer,
        "scheduler": scheduler, "quantization": quantization,
        "reasoning_parser": reasoning_parser, "tool_call_parser": tool_call_parser,
        "speculative": speculative, "compile": compile_,
        "deterministic": deterministic,
        "prefix_cache_dir": prefix_cache_dir, "prefix_cache_disk_gb": prefix_cache_disk_gb,
        "load_format": load_format, "kv_cache_dtype": kv_cache_dtype,
    }
    # host, port, api_key and grpc_port are shorthands for the frontends' own tables, below -s
    shorthands = [f"frontends.grpc.port={grpc_port}"] if grpc_port is not None else []
    cfg = load(config, flags, [*shorthands, *(set_ or [])])
    try:
        cfg = state(ctx).regs.with_defaults(cfg)
        validate(cfg, state(ctx).regs)
    except (RegistryError, ValueError) as exc:
        raise fail(str(exc)) from None
    run = lazy_entry("minisgl_core.service.launcher:launch", "the service")
    remote_opts = {"remote": remote, "remote_address": remote_address,
                   "remote_wait_s": remote_wait} if remote else {}
    raise typer.Exit(int(run(cfg, pm=state(ctx).pm, **remote_opts) or 0))


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
