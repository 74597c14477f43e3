"""``minisgl bench transport``: every registered transport through the common interface.

For each transport one peer is started (a spawned process; a thread for in-process transports)
and every (mode, size) case runs against it: one-way latency p50/p99 from push/pull ping-pong
(RTT / 2) and one-way throughput of a stream the peer sends as fast as it can. The measuring
side is sync (``send``/``recv``) or async (``asend``/``arecv``); the peer is always sync.
``multiprocessing.Queue`` is the baseline, and ratios are to zmq (ipc, sync) at the same size.

With ``endpoints="tcp"`` every transport that offers tcp endpoints (its factory has
``write_keys``) runs again over loopback tcp, and with ``auth`` once more with keys (zmq CURVE,
nng TLS), beside its ipc figures; the host's own ceiling comes in the same run, as a raw unix
socket and a raw loopback tcp socket carrying length-prefixed frames from plain Python.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from minisgl_core.bench.options import JsonOpt, fail
from minisgl_core.bench.transport_ends import queue_peer, socket_peer, transport_peer
from minisgl_core.bench.transport_peer import Measured, measure_async, measure_sync
from minisgl_core.bench.transport_report import REFERENCE, Row, make_row, median_rows, table

DEFAULT_SIZES = (64, 1024, 64 * 1024, 1024 * 1024)
BASELINE = "mp.Queue"
RAW = "socket"  # length-prefixed frames on a plain unix or tcp socket (with --endpoints tcp)
PIPE_BUDGET_BYTES = 128 << 20  # cap what one pipe may buffer: hwm = this // largest size


def _say(message: str) -> None:
    print(f"bench transport: {message}", file=sys.stderr, flush=True)


def _plan(transports: Sequence[str] | None, endpoints: str, auth: bool,
          key_dir: Path) -> tuple[list[tuple[str, bool, str, dict[str, Any]]], list[str]]:
    """The (name, multiprocess, endpoints, options) cases to run, reference first, and the
    plugin modules to load; keys for the ``tcp+auth`` cases are written under ``key_dir``."""
    from minisgl_core.plugin.loading import build_manager, collect, loaded_module_names
    from minisgl_core.plugin.transport_tcp import write_all_keys

    pm = build_manager()
    regs = collect(pm)
    names = list(transports) if transports else regs.transports.names()
    names.sort(key=lambda n: (n != REFERENCE, n))
    plan: list[tuple[str, bool, str, dict[str, Any]]] = []
    for name in names:
        try:
            factory = regs.transports.get(name)
            multiprocess = bool(getattr(factory, "multiprocess", True))
            plan.append((name, multiprocess, "ipc", {}))
            if endpoints != "tcp" or not hasattr(factory, "write_keys"):
                continue
            plan.append((name, multiprocess, "tcp", {"endpoints": "tcp"}))
            if auth:
                write_all_keys(regs, key_dir, [name])
                plan.append((name, multiprocess, "tcp+auth",
                             {"endpoints": "tcp", "keys": str(key_dir)}))
        except Exception as exc:  # one broken transport must not stop the others
            _say(f"skipping {name}: {exc}")
    return plan, loaded_module_names(pm)


def run(transports: Sequence[str] | None = None, sizes: Sequence[int] | None = None,
        duration: float = 1.0, emit: Any = None, endpoints: str = "ipc",
        auth: bool = False) -> list[Row]:
    """Measure everything; call ``emit(row)`` as each case finishes; return all rows."""
    sizes = list(sizes or DEFAULT_SIZES)
    if any(s < 1 for s in sizes):
        raise ValueError(f"message sizes must be >= 1 byte, got {sizes}")
    if endpoints not in ("ipc", "tcp"):
        raise ValueError(f'endpoints must be "ipc" or "tcp", got {endpoints!r}')
    hwm = max(16, min(1000, PIPE_BUDGET_BYTES // max(sizes)))
    common = {"hwm": hwm, "max_message_bytes": max(64 << 20, 2 * max(sizes))}
    rows: list[Row] = []
    ref: dict[int, Measured] = {}  # zmq sync results by size
    with ExitStack() as stack:
        key_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mb-keys-")))
        plan, plugins = _plan(transports, endpoints, auth, key_dir)
        peers: list[tuple[str, str, str, Any, tuple[str, ...]]] = [
            (name, where, "process" if mp else "thread",
             lambda n=name, m=mp, o={**common, **extra}: transport_peer(n, plugins, o, m),
             ("sync", "async"))
            for name, mp, where, extra in plan]
        peers.append((BASELINE, "ipc", "process", lambda: queue_peer(hwm), ("sync",)))
        if endpoints == "tcp":  # what the kernel gives Python with no library in between
            peers += [(RAW, where, "process", lambda w=where: socket_peer(w), ("sync",))
                      for where in ("ipc", "tcp")]
        for name, where, peer, start, modes in peers:
            label = name if where == "ipc" else f"{name} over {where}"
            _say(f"{label} ({peer} peer, hwm {hwm}) ...")
            t0 = time.perf_counter()
            try:
                with start() as (tx, rx):
                    for mode in modes:
                        measure = measure_sync if mode == "sync" else measure_async
                        for size in sizes:
                            m = measure(tx, rx, size, duration)
                            if (name, where, mode) == (REFERENCE, "ipc", "sync"):
                                ref[size] = m
                            row = make_row(name, peer, mode, size, m, ref, where)
                            rows.append(row)
                            if emit is not None:
                                emit(row)
            except Exception as exc:  # report and go on with the next transport
                _say(f"{label} failed: {type(exc).__name__}: {exc}")
            _say(f"{label} done in {time.perf_counter() - t0:.1f} s")
    return rows



def main(transports: list[str] | None = None, sizes: list[int] | None = None,
         json_lines: bool = False, duration: float = 1.0, repeat: int = 1,
         endpoints: str = "ipc", auth: bool = False) -> None:
    """Run the benchmark; print a markdown table, or one JSON object per case as it finishes.

    With ``repeat`` > 1 the whole run is repeated and each figure is the median over the runs
    (printed at the end, also in JSON mode).
    """

    def emit(row: Row) -> None:
        print(json.dumps(asdict(row)), flush=True)

    if repeat > 1:
        runs = []
        for i in range(repeat):
            _say(f"run {i + 1} of {repeat}")
            runs.append(run(transports, sizes, duration, endpoints=endpoints, auth=auth))
        rows = median_rows(runs)
        if json_lines:
            for row in rows:
                emit(row)
    else:
        rows = run(transports, sizes, duration, emit if json_lines else None, endpoints, auth)
    if not json_lines:
        print(table(rows))
        runs_note = f"; medians of {repeat} runs" if repeat > 1 else ""
        print(f"\nLatency is one-way (ping-pong RTT / 2){runs_note}. "
              "Ratios compare with zmq (ipc, sync) at the same size: p50 > 1 is slower, "
              "msg/s < 1 is slower. tcp is loopback (127.0.0.1); tcp+auth adds the keys "
              "(zmq CURVE, nng TLS).")


def transport_command(
    ctx: typer.Context,
    transport: Annotated[list[str] | None, typer.Option(help="Only these (repeat).")] = None,
    size: Annotated[list[int] | None, typer.Option(help="Message sizes in bytes (repeat).")] = None,
    json_: JsonOpt = False,
    duration: Annotated[float, typer.Option(help="Seconds per case.")] = 1.0,
    repeat: Annotated[int, typer.Option(
        min=1, help="Runs of the whole benchmark; each figure is the median over them.")] = 1,
    endpoints: Annotated[str, typer.Option(
        help="ipc, or tcp: loopback tcp as well, beside ipc.")] = "ipc",
    auth: Annotated[bool, typer.Option(
        help="With tcp, also with keys (zmq CURVE, nng TLS); implies --endpoints tcp.")] = False,
) -> None:
    """Latency and throughput of every registered transport through the common interface."""
    from minisgl_core.plugin.loading import build_manager, collect
    from minisgl_core.plugin.registry import RegistryError

    # the registries the `minisgl` app built for this invocation (its context object)
    plugins = ctx.find_root().obj
    regs = plugins.regs if plugins is not None else collect(build_manager())
    for name in transport or []:
        try:
            regs.transports.check(name)
        except RegistryError as exc:
            raise fail(str(exc)) from None
    if endpoints not in ("ipc", "tcp"):
        raise fail(f'--endpoints must be ipc or tcp, got "{endpoints}"')
    main(transports=transport or None, sizes=size or None, json_lines=json_, duration=duration,
         repeat=repeat, endpoints="tcp" if auth else endpoints, auth=auth)
