"""``minisgl bench transport``, ``offline``, ``quality``, ``speculative``, ``kernels`` and
``prefix`` (``bench serve`` and ``bench compare`` are defined beside their benchmarks in
``minisgl_core.bench``)."""

from __future__ import annotations

from typing import Annotated

import typer

from minisgl_core.cli.common import JsonOpt, fail, lazy_entry, state
from minisgl_core.plugin.registry import RegistryError


def _quantizations(values: list[str]) -> list[str | None]:
    """``--quantization`` values as the engine takes them: fp32 (or none) is None."""
    chosen: list[str | None] = []
    for q in values:
        if q not in ("fp32", "none", "int8", "int8-wo", "int4"):
            raise fail(f'--quantization must be fp32, int8, int8-wo or int4, got "{q}"')
        chosen.append(None if q in ("fp32", "none") else q)
    return chosen


def _dtypes(values: list[str]) -> list[str]:
    """``--dtype`` values for the offline benchmark, checked before anything loads."""
    for d in values:
        if d not in ("float32", "bfloat16", "auto"):
            raise fail(f'--dtype must be float32, bfloat16 or auto, got "{d}"')
    return list(dict.fromkeys(values))


def bench_transport(
    ctx: typer.Context,
    transport: Annotated[list[str] | None, typer.Option(help="Only these (repeat).")] = None,
    size: Annotated[list[int] | None, typer.Option(help="Message sizes in bytes (repeat).")] = None,
    json_: JsonOpt = False,
    duration: Annotated[float, typer.Option(help="Seconds per case.")] = 1.0,
    endpoints: Annotated[str, typer.Option(
        help="ipc, or tcp: loopback tcp as well, beside ipc.")] = "ipc",
    auth: Annotated[bool, typer.Option(
        help="With tcp, also with keys (zmq CURVE, nng TLS); implies --endpoints tcp.")] = False,
) -> None:
    """Latency and throughput of every registered transport through the common interface."""
    for name in transport or []:
        try:
            state(ctx).regs.transports.check(name)
        except RegistryError as exc:
            raise fail(str(exc)) from None
    if endpoints not in ("ipc", "tcp"):
        raise fail(f'--endpoints must be ipc or tcp, got "{endpoints}"')
    run = lazy_entry("minisgl_core.bench.transport:main", "the transport benchmark")
    run(transports=transport or None, sizes=size or None, json_lines=json_, duration=duration,
        endpoints="tcp" if auth else endpoints, auth=auth)


def bench_offline(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    batch_size: Annotated[list[int] | None, typer.Option(help="Batch sizes (repeat).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 64,
    tp: Annotated[int, typer.Option(
        min=1, help="Split the engine over N tensor-parallel ranks on this host.")] = 1,
    quantization: Annotated[list[str] | None, typer.Option(
        help="Engine weights: fp32, int8, int8-wo or int4 (repeat to run several, interleaved)."
    )] = None,
    dtype: Annotated[list[str] | None, typer.Option(
        help="float32, bfloat16 or auto (repeat to run several, interleaved).")] = None,
    profile: Annotated[bool, typer.Option(
        help="Break one decode step into matmul / attention / other ops / Python.")] = False,
    ceilings: Annotated[bool, typer.Option(
        help="Measure the host's ceilings and report each figure as a share of them.")] = True,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per system; the best counts.")] = 3,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    compile_: Annotated[bool, typer.Option(
        "--compile/--no-compile",
        help="Run every mode eager and with its decode step compiled, side by side.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Offline engine throughput (no server) for a few batch sizes, against transformers."""
    chosen = _quantizations(quantization or ["fp32"])
    run = lazy_entry("minisgl_core.bench.engine_vs_hf:main", "the offline benchmark")
    run(model=model, batch_sizes=batch_size or [1, 8, 32], max_tokens=max_tokens, json_lines=json_,
        tp=tp, quantization=chosen, profile=profile, ceilings=ceilings, repeat=repeat,
        threads=threads, dtypes=_dtypes(dtype or ["float32"]), compile_step=compile_)


def bench_quality(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    quantization: Annotated[list[str] | None, typer.Option(
        help="int8, int8-wo or int4: measure it against fp32 (fp32 alone without).")] = None,
    tokens: Annotated[int, typer.Option(min=2, help="Tokens of text for the perplexity.")] = 4096,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    bf16: Annotated[bool, typer.Option(
        help="Also measure the model in bf16, and int8-wo / int4 with bf16 activations.")
    ] = False,
    peer: Annotated[str | None, typer.Option(
        help="llamacpp: also llama.cpp's own perplexity of the GGUF (Q4_1) and its Q8_0 on the "
             "same tokens, and every row by its method (`make bench-peers PEERS=llamacpp`).")
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Perplexity on pydoc_data.topics and greedy agreement with fp32; exit 1 if a mode misses
    its target (perplexity within 3% of fp32's for int8, 0.5% for int8-wo and bf16, 5% for
    int4; "Paris" answered)."""
    chosen = _quantizations(quantization or [])
    if peer not in (None, "llamacpp"):
        raise fail(f'--peer must be llamacpp, got "{peer}"')
    run = lazy_entry("minisgl_core.bench.quality:main", "the quality benchmark")
    raise typer.Exit(run(model=model, quantization=chosen, tokens=tokens, json_lines=json_,
                         threads=threads, bf16=bf16, peer=peer))


def bench_speculative(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    requests: Annotated[int, typer.Option(min=1, help="Requests per workload.")] = 8,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request.")] = 96,
    concurrency: Annotated[list[int] | None, typer.Option(
        help="Requests in flight at once (repeat).")] = None,
    num_speculative_tokens: Annotated[int, typer.Option(min=1, help="Draft tokens (k).")] = 4,
    prompt_lookup_min: Annotated[int, typer.Option(
        min=1, max=4, help="Shortest suffix n-gram looked up.")] = 2,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per system; the best counts.")] = 3,
    quantization: Annotated[str | None, typer.Option(
        help="Engine weights: int8, int8-wo or int4 (default: the dtype's).")] = None,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or auto.")] = "auto",
    compile_: Annotated[bool, typer.Option(
        "--compile/--no-compile", help="Both engines with their decode step compiled.")] = False,
    json_: JsonOpt = False,
) -> None:
    """N-gram speculation on a repeating and a story workload, with and without it; exit 1 if
    it changed a greedy output."""
    (scheme,) = _quantizations([quantization or "fp32"])
    _dtypes([dtype])
    run = lazy_entry("minisgl_core.bench.speculative:main", "the speculation benchmark")
    raise typer.Exit(run(model=model, requests=requests, max_tokens=max_tokens,
                         concurrencies=concurrency or [1, 8], k=num_speculative_tokens,
                         threads=threads, repeat=repeat, json_lines=json_,
                         quantization=scheme, dtype=dtype, compile_step=compile_,
                         lookup_min=prompt_lookup_min))


def bench_kernels(
    model: Annotated[str | None, typer.Option(help="Model directory or name (its shapes).")] = None,
    rows: Annotated[list[int] | None, typer.Option(help="Input rows (repeat).")] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    isa: Annotated[str | None, typer.Option(
        help="c, avx2 or avx512 (default: the widest this CPU runs).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per case; the best counts.")] = 5,
    bf16: Annotated[bool, typer.Option(
        help="Also bf16 inputs (int4 on AVX512-BF16's dot product where the CPU has it; "
             "the AMX kernels too, as bf16-amx, where it has AMX).")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """The native weight-only kernels alone on a model's layer shapes: GB/s of packed weight
    read, against the host's read bandwidth."""
    if isa not in (None, "c", "avx2", "avx512"):
        raise fail(f'--isa must be c, avx2 or avx512, got "{isa}"')
    run = lazy_entry("minisgl_core.bench.wo_kernels:main", "the kernel benchmark")
    raise typer.Exit(run(model=model, rows=rows or [1, 2, 4, 8], threads=threads, isa=isa,
                         repeat=repeat, json_lines=json_, bf16=bf16))


def bench_prefix(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    restart: Annotated[bool, typer.Option(
        "--restart/--chats", help="TTFT of long prompts cold, from RAM and from the disk tier "
        "after a restart (default); or chats sharing a system prompt, radix against naive.")
    ] = True,
    length: Annotated[list[int] | None, typer.Option(
        min=16, help="--restart: prompt lengths in tokens (repeat; default 1024 4096 8192).")
    ] = None,
    directory: Annotated[str | None, typer.Option(
        help="--restart: where the page files go (default: a temporary directory).")] = None,
    drop_caches: Annotated[bool, typer.Option(
        help="--restart: evict the page files from the OS page cache before the disk runs.")
    ] = False,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or auto.")] = "float32",
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    json_: JsonOpt = False,
) -> None:
    """The prefix cache: after a restart, from its disk tier (--restart), or on chats (--chats);
    exit 1 if the cache changed a greedy output."""
    _dtypes([dtype])
    if not restart:
        run = lazy_entry("minisgl_core.bench.prefix_cache:main", "the prefix-cache benchmark")
        raise typer.Exit(run(model=model, threads=threads, json_lines=json_))
    run = lazy_entry("minisgl_core.bench.prefix_restart:main", "the prefix-cache benchmark")
    raise typer.Exit(run(model=model, lengths=length or [1024, 4096, 8192], threads=threads,
                         dtype=dtype, directory=directory, drop_caches=drop_caches,
                         json_lines=json_))
