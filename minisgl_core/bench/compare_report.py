"""The report of `minisgl bench compare`: results.md (tables) and plot.png (matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minisgl_core.bench.results import markdown_table

HEADERS = ("engine", "concurrency", "out tok/s", "% of offline", "% of host ceiling", "req/s",
           "TTFT p50 ms",
           "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "E2E p50 ms", "E2E p99 ms", "failures")


def _sampling(results: dict[str, Any]) -> str:
    """How the requests sampled: greedy, or the extra body's fields (each engine's defaults for
    the rest); and when they were sent, with a request rate."""
    extra, rate = results.get("extra_body"), results.get("request_rate")
    how = f"requests with {json.dumps(extra)}" if extra else "greedy"
    return how + (f", sent at {rate:g}/s (Poisson arrivals)" if rate else "")


def markdown(results: dict[str, Any]) -> str:
    """results.md: how it was run, the table, and each transport's start time and idle CPU."""
    ceiling = {lv["concurrency"]: lv["output_tok_s"] for lv in results["offline"]}
    host = results.get("ceilings") or {}
    base = host.get("quantization", "fp32")

    def of_host(lv: dict[str, Any], scheme: str | None = base,
                label: str | None = None) -> float | None:
        """A level's tokens/s as a share of the roofline of its engine's own weight bytes (a
        service that said them), else of its weight format."""
        rooflines = host.get("rooflines", {})
        roof = (rooflines[label]["tok_s"] if label in rooflines
                else host.get("roofline_tok_s", {}) if scheme == base
                else rooflines.get(scheme or "", {}).get("tok_s", {}))
        top = roof.get(str(lv["concurrency"]))
        return 100 * lv["output_tok_s"] / top if top else None
    rows: list[list[object]] = []
    engines = results["service"] + results.get("peers", [])  # peers: other engines' servers
    for svc in engines:
        for lv in svc["levels"]:
            c = ceiling.get(lv["concurrency"])
            pct = 100 * lv["output_tok_s"] / c if c else None
            rows.append([svc["transport"], lv["concurrency"], lv["output_tok_s"], pct,
                         of_host(lv, svc.get("scheme", base), svc["transport"]), lv["req_s"],
                         lv["ttft_p50_ms"], lv["ttft_p99_ms"], lv["tpot_p50_ms"],
                         lv["tpot_p99_ms"], lv["e2e_p50_ms"], lv["e2e_p99_ms"], lv["failures"]])
    for lv in results["offline"]:
        rows.append(["offline engine", lv["concurrency"], lv["output_tok_s"], 100.0, of_host(lv),
                     lv["req_s"],
                     lv["ttft_p50_ms"], lv["ttft_p99_ms"], lv["tpot_p50_ms"], lv["tpot_p99_ms"],
                     lv["e2e_p50_ms"], lv["e2e_p99_ms"], lv["failures"]])
    idle = markdown_table(
        ("engine", "start s", "RSS MB (after load)", "idle CPU % (before load)",
         "idle CPU % (after load)", "machine load avg at start"),
        [[s["transport"], s["startup_s"], s.get("rss_mb"), s["idle_cpu_pct_before"],
          s["idle_cpu_pct_after"], s.get("load_avg")] for s in engines])
    processes = sorted({k for s in engines for k in s.get("cpu_us_per_token", {})})
    cpu = markdown_table(
        ("engine", *processes),
        [[s["transport"], *(s.get("cpu_us_per_token", {}).get(k) for k in processes)]
         for s in engines])
    m = results["machine"]
    return "\n".join([
        f"Command: `{results['command']}`", "",
        f"Model {_model(results)} ({results.get('scheduler', 'continuous')} scheduler), "
        f"{results['max_tokens']} output tokens per request (EOS "
        f"ignored), streaming chat, {_sampling(results)}; {results['prompt']}; {m['cpus']} CPUs "
        f"({m['processor'] or m['machine']}), {results['date']}. Each level ran "
        f"{results.get('repeat', 1)} time(s) per engine, interleaved; the median run is shown.",
        "",
        markdown_table(HEADERS, rows), "", _ceiling_line(host), "", idle, "",
        "CPU microseconds per output token, by process, over all levels (warm-ups included):",
        "", cpu, "",
    ])


def _model(results: dict[str, Any]) -> str:
    """The model's name, and for ``--model-config`` the config whose shapes it has."""
    config = results.get("model_config")
    return f"{results['model']} (random weights at {config}'s shapes)" if config \
        else results["model"]


def _ceiling_line(host: dict[str, Any]) -> str:
    if not host:
        return "Host ceilings: not measured."
    def levels(roof: dict[str, Any]) -> str:
        return ", ".join(f"{c}: {v:.0f} tok/s ({roof['bound'][c]})"
                         for c, v in roof["tok_s"].items())
    roofs = {host["quantization"]: {"tok_s": host["roofline_tok_s"], "bound": host["bound"]},
             **host.get("rooflines", {})}
    text = "; ".join(f"{scheme} {levels(roof)}" for scheme, roof in roofs.items())
    reads = host.get("read_gb_s_readings", [])
    when = (" (the better of " + " and ".join(f"{r:.1f}" for r in reads) + ", before and after "
            "the levels; each rate the better of its two)" if len(reads) == 2 else "")
    return (f"Host ceilings, measured in this run with {host['threads']} threads: memory read "
            f"{host['read_gb_s']:.1f} GB/s{when}, fp32 GEMM {host['fp32_gflop_s']:.0f} GFLOP/s, "
            f"bf16 GEMM {host.get('bf16_gflop_s', 0.0):.0f} GFLOP/s, int8 GEMM "
            f"{host['int8_gop_s']:.0f} GOP/s; the model's roofline by weight format and "
            f"level (a GGUF's from the bytes its matrices are stored in, a service's from the "
            f"bytes it says its matrices hold; bf16 rows have none): "
            f"{text}.")


def plot(results: dict[str, Any], path: Path) -> None:
    """Output tokens/s and TTFT p50 against concurrency; one line per transport, offline dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    lines = [(s["transport"], s["levels"], {"marker": "o"})
             for s in results["service"] + results.get("peers", [])]
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
    scheduler = results.get("scheduler", "continuous")
    what = _model(results) if scheduler == "continuous" else f"{scheduler} scheduler"
    fig.suptitle(f"minisgl serving: {what}, {results['max_tokens']} tokens/request")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
