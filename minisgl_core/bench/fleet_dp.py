"""``minisgl bench dp``: `--dp 2` (1 thread each) vs `--dp 1` (2 threads) on the default model
(or ``--model``), and the prefix-cache hit rate of affinity vs round-robin dispatch on a
shared-system-prompt workload, same run.

Usage: minisgl bench dp [--model default] [--concurrency 1 --concurrency 8 ...]
Throughput: `minisgl bench serve` at each concurrency (``--waves`` x concurrency requests per
level, at least 4) against one service at a time, both setups at a level one after the other.
Hit rate: ``--systems`` system prompts of ~``--system-words`` words, each asked
``--per-system`` questions at concurrency 8; the share of admitted prompt tokens the prefix
cache supplied (``prefix_cache_hit_tokens_total / scheduler_prompt_tokens_total`` from
/metrics), for `--dp 1`, and `--dp 2` with each ``dp_policy`` (docs/scale-out.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from minisgl_core.testing.service import RunningService

COMMON = ["--max-seq-len-override", "2048"]
SETUPS = {"--dp 1, 2 threads": ["-s", "num_threads=2"],
          "--dp 2, 1 thread each": ["--dp", "2", "-s", "num_threads=2"]}
HIT_SETUPS = {"--dp 1": [], "--dp 2 cache_aware": ["--dp", "2"],
              "--dp 2 round_robin": ["--dp", "2", "-s", "dp_policy=round_robin"]}


def hit_rate(svc: RunningService, systems: int, per_system: int, words: int) -> float:
    """Prefix-cache hit rate of a shared-system-prompt workload (new tokens only)."""
    import httpx

    model = svc.model_name()
    text = ("You are a helpful assistant for a small shop that sells tea, books and bicycles. "
            "Answer briefly and politely, and never invent prices. ").split()

    def ask(i: int) -> None:
        s = i % systems
        system = f"Assistant {s}. " + " ".join(text[(k + s) % len(text)] for k in range(words))
        r = httpx.post(f"{svc.url}/v1/chat/completions", timeout=300, json={
            "model": model, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": f"Question number {i}?"}]})
        r.raise_for_status()

    before = svc.metrics()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(ask, range(systems * per_system)))
    after = svc.metrics()

    def delta(name: str) -> float:
        return after[f"minisgl_{name}"] - before.get(f"minisgl_{name}", 0.0)

    return delta("prefix_cache_hit_tokens_total") / delta("scheduler_prompt_tokens_total")


def serve(url: str, model: str, c: int, requests: int, max_tokens: int) -> dict[str, Any]:
    """`minisgl bench serve --json` at one level; its row even when some requests failed."""
    cmd = [sys.executable, "-m", "minisgl_core", "bench", "serve", "--url", url, "--json",
           "--model", model, "--requests", str(requests), "--max-tokens", str(max_tokens),
           "--concurrency", str(c)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not rows:
        raise RuntimeError(f"bench serve against {url} failed:\n{done.stderr[-2000:]}")
    return rows[0]


def dp_command(
    concurrency: Annotated[list[int] | None, typer.Option(
        help="Requests in flight at once (repeat; default 1, 8 and 32).")] = None,
    waves: Annotated[int, typer.Option(
        min=1, help="Requests per level: waves x concurrency (at least 4).")] = 2,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request.")] = 32,
    systems: Annotated[int, typer.Option(min=1, help="Hit rate: system prompts.")] = 8,
    per_system: Annotated[int, typer.Option(
        min=1, help="Hit rate: questions per system prompt.")] = 6,
    system_words: Annotated[int, typer.Option(
        min=1, help="Hit rate: words per system prompt.")] = 120,
    model: Annotated[str, typer.Option(
        help="Model every service serves: a name, a path or 'default'.")] = "default",
) -> None:
    """--dp 2 against --dp 1 on the default model or ``--model`` (throughput per concurrency
    level) and the prefix-cache hit rate of each dispatch policy, same run."""
    from minisgl_core.testing.service import launch_service

    levels = concurrency or [1, 8, 32]
    tmp = Path(tempfile.mkdtemp(prefix="minisgl-dp-"))
    # each row is printed as soon as it is measured, so a run cut short keeps what it measured
    print("| setup | prefix-cache hit rate |\n|---|---|", flush=True)
    for name, extra in HIT_SETUPS.items():
        svc = launch_service(model, log_dir=tmp, args=[*COMMON, *extra], timeout=600)
        try:
            rate = hit_rate(svc, systems, per_system, system_words)
        finally:
            svc.stop()
        print(f"| {name} | {rate:.1%} |", flush=True)
    print("\n| setup | concurrency | output tok/s | TTFT p50 ms | req/s | failed |", flush=True)
    print("|---|---|---|---|---|---|", flush=True)
    for c in levels:  # both setups at one level, one after the other
        for name, extra in SETUPS.items():
            svc = launch_service(model, log_dir=tmp, args=[*COMMON, *extra], timeout=600)
            try:
                r = serve(svc.url, svc.model_name(), c, max(4, waves * c), max_tokens)
            finally:
                svc.stop()
            print(f"| {name} | {c} | {r['output_tok_s']:.1f} | {r['ttft_p50_ms']:.0f}"
                  f" | {r['req_s']:.2f} | {r['failures']} |", flush=True)

