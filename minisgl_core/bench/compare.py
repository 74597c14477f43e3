"""`minisgl bench compare`: the same load on the service once per transport, next to the offline
engine, written to a folder as results.json, results.md and plot.png."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from minisgl_core.bench.serve import (
    Record,
    ServeResult,
    default_requests,
    make_messages,
    markdown_table,
    run_serve,
)

IDLE_SETTLE_S = 1.0  # let the last request's bookkeeping finish before idle CPU is sampled


def say(message: str) -> None:
    print(f"bench compare: {message}", file=sys.stderr, flush=True)


def multiprocess_transports(names: Sequence[str] | None = None) -> list[str]:
    """Registered transports that work across processes (all of them, or those of ``names``)."""
    from minisgl_core.plugins import build_manager, collect

    regs = collect(build_manager())
    out = []
    for name in names or regs.transports.names():
        factory = regs.transports.get(name)  # unknown names raise with a did-you-mean
        flag = getattr(factory, "multiprocess", None)
        if flag is None:  # a factory function: build one to ask
            transport = factory({})
            flag = transport.multiprocess
            getattr(transport, "close", lambda: None)()
        if flag:
            out.append(name)
        elif names:
            raise ValueError(f"transport {name} only works inside one process")
    return out


def cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU seconds so far of ``pid`` (as "launcher") and each of its descendants
    (by process title, e.g. "minisgl::scheduler"; pid-suffixed when a title repeats)."""
    import psutil

    root = psutil.Process(pid)
    out: dict[str, float] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            title = "launcher" if proc.pid == pid else " ".join(proc.cmdline()[:1])
        except psutil.Error:
            continue
        key = title if title not in out else f"{title}:{proc.pid}"
        out[key] = times.user + times.system
    return out


def idle_cpu_percent(pid: int, seconds: float = 3.0) -> float:
    """CPU used by ``pid`` and its descendants over ``seconds``, in % of one core."""
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    after, wall = cpu_seconds(pid), time.monotonic() - t0
    return 100 * sum(after[k] - before[k] for k in after.keys() & before.keys()) / wall


def cpu_per_token(before: dict[str, float], after: dict[str, float], client_s: float,
                  tokens: int) -> dict[str, float]:
    """Microseconds of CPU per output token, by process, the load generator ("client") too;
    processes that used none are left out."""
    used = {k: after[k] - before[k] for k in after.keys() & before.keys()}
    used["client"] = client_s
    return {k: round(1e6 * v / max(tokens, 1), 1) for k, v in sorted(used.items()) if v > 0}


def measure_service(model_dir: str, transport: str, concurrency: Sequence[int],
                    requests: int | None, max_tokens: int, prompt_len: int | None,
                    duration_limit_s: float, log_dir: Path, launch_args: Sequence[str] = (),
                    progress: bool = True) -> dict[str, Any]:
    """Launch the service on ``transport``, sample its idle CPU before and after the load, run
    the load, stop it."""
    from minisgl_core.testing.service import launch_service

    say(f"{transport}: starting the service")
    load_before = os.getloadavg()[0]  # others' load on the machine: how noisy this run was
    t0 = time.monotonic()
    service = launch_service(model_dir, transport=transport, args=launch_args, log_dir=log_dir,
                             timeout=600.0)
    startup = time.monotonic() - t0
    try:
        time.sleep(IDLE_SETTLE_S)
        idle_before = idle_cpu_percent(service.proc.pid)
        say(f"{transport}: ready in {startup:.1f} s, idle CPU {idle_before:.1f}% of a core")
        cpu_before, client_before = cpu_seconds(service.proc.pid), time.process_time()
        levels = asyncio.run(run_serve(service.url, concurrency, requests, max_tokens,
                                       prompt_len=prompt_len, duration_limit_s=duration_limit_s,
                                       progress=progress))
        cpu_us = cpu_per_token(cpu_before, cpu_seconds(service.proc.pid),
                               time.process_time() - client_before,
                               sum(lv.output_tokens for lv in levels))
        time.sleep(IDLE_SETTLE_S)
        idle_after = idle_cpu_percent(service.proc.pid)
        say(f"{transport}: idle CPU after the load {idle_after:.1f}% of a core")
    finally:
        code = service.stop()
    return {"transport": transport, "startup_s": startup, "idle_cpu_pct_before": idle_before,
            "idle_cpu_pct_after": idle_after, "exit_code": code, "load_avg": load_before,
            "cpu_us_per_token": cpu_us, "levels": [r.as_dict() for r in levels]}


def offline_ceiling(model_dir: str, batch_sizes: Sequence[int], max_tokens: int,
                    prompt_len: int | None, requests: int | None = None) -> list[dict[str, Any]]:
    """The offline Engine on the same chats as the service's level, greedy, EOS ignored: batch
    size b runs the level's requests (``requests`` or the service default for b) as whole
    batches of b added at once, after the same warm-up wave; TTFT counts from the add."""
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.messages import SamplingParams

    # the service's scheduler takes every core (launcher: os.cpu_count()); so does this
    engine = Engine(EngineConfig(model=model_dir, num_threads=os.cpu_count() or 1))
    tok = engine.tokenizer

    def prompt(i: int) -> list[int]:
        text = tok.apply_chat_template(make_messages(i, prompt_len), add_generation_prompt=True,
                                       tokenize=False)
        return list(tok.encode(text, add_special_tokens=False))

    def batch(ids: range, n_tokens: int) -> list[Record]:
        sp = SamplingParams(max_tokens=n_tokens, temperature=0.0, ignore_eos=True)
        start = time.perf_counter()
        prompts = {f"b{i}": prompt(i) for i in ids}
        for rid, p in prompts.items():
            engine.add_request(rid, p, sp)
        first: dict[str, float] = {}
        records = []
        while engine.has_work():
            for out in engine.step():
                now = time.perf_counter() - start
                if out.token_ids:
                    first.setdefault(out.request_id, now)
                if out.finish_reason is not None:
                    records.append(Record(True, start, first.get(out.request_id, now), now,
                                          out.completion_tokens, out.prompt_tokens))
        return records

    results = []
    for b in batch_sizes:
        say(f"offline engine: batch {b}")
        batch(range(b), min(4, max_tokens))  # warm-up
        records: list[Record] = []
        t0 = time.perf_counter()
        for r in range(-(-(requests or default_requests(b)) // b)):
            records += batch(range(r * b, (r + 1) * b), max_tokens)
        results.append(ServeResult.from_records(b, len(records), records,
                                                time.perf_counter() - t0, max_tokens, True))
    return [r.as_dict() for r in results]


HEADERS = ("engine", "concurrency", "out tok/s", "% of offline", "req/s", "TTFT p50 ms",
           "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "E2E p50 ms", "E2E p99 ms", "failures")


def markdown(results: dict[str, Any]) -> str:
    """results.md: how it was run, the table, and each transport's start time and idle CPU."""
    ceiling = {lv["concurrency"]: lv["output_tok_s"] for lv in results["offline"]}
    rows: list[list[object]] = []
    for svc in results["service"]:
        for lv in svc["levels"]:
            c = ceiling.get(lv["concurrency"])
            pct = 100 * lv["output_tok_s"] / c if c else None
            rows.append([svc["transport"], lv["concurrency"], lv["output_tok_s"], pct,
                         lv["req_s"], lv["ttft_p50_ms"], lv["ttft_p99_ms"], lv["tpot_p50_ms"],
                         lv["tpot_p99_ms"], lv["e2e_p50_ms"], lv["e2e_p99_ms"], lv["failures"]])
    for lv in results["offline"]:
        rows.append(["offline engine", lv["concurrency"], lv["output_tok_s"], 100.0, lv["req_s"],
                     lv["ttft_p50_ms"], lv["ttft_p99_ms"], lv["tpot_p50_ms"], lv["tpot_p99_ms"],
                     lv["e2e_p50_ms"], lv["e2e_p99_ms"], lv["failures"]])
    idle = markdown_table(
        ("transport", "start s", "idle CPU % (before load)", "idle CPU % (after load)",
         "machine load avg at start"),
        [[s["transport"], s["startup_s"], s["idle_cpu_pct_before"], s["idle_cpu_pct_after"],
          s.get("load_avg")] for s in results["service"]])
    processes = sorted({k for s in results["service"] for k in s.get("cpu_us_per_token", {})})
    cpu = markdown_table(
        ("transport", *processes),
        [[s["transport"], *(s.get("cpu_us_per_token", {}).get(k) for k in processes)]
         for s in results["service"]])
    m = results["machine"]
    return "\n".join([
        f"Command: `{results['command']}`", "",
        f"Model {results['model']}, {results['max_tokens']} output tokens per request (EOS "
        f"ignored), streaming chat, greedy; {results['prompt']}; {m['cpus']} CPUs "
        f"({m['processor'] or m['machine']}), {results['date']}.", "",
        markdown_table(HEADERS, rows), "", idle, "",
        "CPU microseconds per output token, by process, over all levels (warm-ups included):",
        "", cpu, "",
        *([f"Machine load average when the offline engine started: "
           f"{results['offline_load_avg']:.1f}.", ""] if "offline_load_avg" in results else []),
    ])


def plot(results: dict[str, Any], path: Path) -> None:
    """Output tokens/s and TTFT p50 against concurrency; one line per transport, offline dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    lines = [(s["transport"], s["levels"], {"marker": "o"}) for s in results["service"]]
    if results["offline"]:
        lines.append(("offline engine", results["offline"],
                      {"linestyle": "--", "color": "black", "marker": "x"}))
    for label, levels, style in lines:
        xs = [lv["concurrency"] for lv in levels]
        tput.plot(xs, [lv["output_tok_s"] for lv in levels], label=label, **style)
        ttft.plot(xs, [lv["ttft_p50_ms"] for lv in levels], label=label, **style)
    for ax, title in ((tput, "output tokens/s"), (ttft, "TTFT p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(results["concurrency"], [str(c) for c in results["concurrency"]])
        ax.set_xlabel("concurrency (offline: batch size)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    ttft.set_yscale("log")
    ttft.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ttft.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ttft.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.suptitle(f"minisgl serving: {results['model']}, {results['max_tokens']} tokens/request")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(transports: list[str] | None, concurrency: list[int], requests: int | None,
         max_tokens: int, model: str | None, out_dir: Path, prompt_len: int | None = None,
         duration_limit_s: float = 300.0, offline: bool = True, launch_args: Sequence[str] = (),
         command: str = "minisgl bench compare", progress: bool = True) -> dict[str, Any]:
    """Run everything, write results.json, results.md and plot.png into ``out_dir``."""
    from minisgl_core.launcher import resolve_model
    from minisgl_core.plugins import build_manager

    names = multiprocess_transports(transports)
    if not names:
        raise ValueError("no multi-process transport is installed")
    model_dir = resolve_model(build_manager(), model)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "logs").mkdir(exist_ok=True)
    prompt = (f"prompt padded to ~{prompt_len} words" if prompt_len
              else "prompt: a one-line question")
    results: dict[str, Any] = {
        "command": command, "model": Path(model_dir).name, "model_dir": model_dir,
        "max_tokens": max_tokens, "concurrency": list(concurrency), "requests": requests,
        "prompt_len": prompt_len, "prompt": prompt,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "machine": platform.machine(),
                    "processor": platform.processor(), "python": platform.python_version()},
        "service": [], "offline": [],
    }
    for name in names:
        results["service"].append(measure_service(
            model_dir, name, concurrency, requests, max_tokens, prompt_len, duration_limit_s,
            out_dir / "logs", launch_args, progress))
    if offline:
        results["offline_load_avg"] = os.getloadavg()[0]
        results["offline"] = offline_ceiling(model_dir, concurrency, max_tokens, prompt_len,
                                             requests)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "results.md").write_text(markdown(results))
    plot(results, out_dir / "plot.png")
    return results


def compare_command(
    transport: Annotated[list[str] | None, typer.Option(
        help="Only these transports (repeat) (default: every multi-process one).")] = None,
    concurrency: Annotated[list[int] | None, typer.Option(
        help="Concurrency levels and offline batch sizes (repeat) (default: 1, 8, 32).")] = None,
    requests: Annotated[int | None, typer.Option(
        help="Requests per level (default: 2 x concurrency, at least 8).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 64,
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    out: Annotated[Path, typer.Option(help="Results folder.")] = Path("results/compare"),
    prompt_len: Annotated[int | None, typer.Option(
        help="Pad the prompt to about this many words (default: a short question).")] = None,
    duration_limit: Annotated[float, typer.Option(
        help="Seconds per level after which no new request starts.")] = 300.0,
    offline: Annotated[bool, typer.Option(help="Measure the offline engine too.")] = True,
    set_: Annotated[list[str] | None, typer.Option(
        "-s", "--set", metavar="KEY=VALUE", help="Passed to every `minisgl launch`.")] = None,
) -> None:
    """Run the same streaming load on the service once per transport, next to the offline
    engine; write results.json, results.md and plot.png."""
    argv = [f"--transport={t}" for t in transport or []]
    argv += [f"--concurrency={c}" for c in concurrency or []]
    for flag, value, default in (("requests", requests, None), ("max-tokens", max_tokens, 64),
                                 ("model", model, None), ("prompt-len", prompt_len, None),
                                 ("out", out, Path("results/compare"))):
        if value != default:
            argv.append(f"--{flag}={value}")
    argv += [] if offline else ["--no-offline"]
    launch_args = [arg for kv in set_ or [] for arg in ("-s", kv)]
    argv += launch_args
    try:
        main(transport or None, concurrency or [1, 8, 32], requests, max_tokens, model, out,
             prompt_len, duration_limit, offline, launch_args,
             command=shlex.join(["minisgl", "bench", "compare", *argv]))
    except (ValueError, LookupError, RuntimeError) as exc:
        typer.echo(f"minisgl: error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {out}/results.json, results.md, plot.png")
    typer.echo((out / "results.md").read_text())
