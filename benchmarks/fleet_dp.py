"""`--dp 2` (1 thread each) vs `--dp 1` (2 threads) on the default model, and the prefix-cache hit
rate of affinity vs round-robin dispatch on a shared-system-prompt workload, same run.

Usage: .venv/bin/python benchmarks/fleet_dp.py [--concurrency 1 --concurrency 8 ...]
Throughput: `minisgl bench serve` at each concurrency (``--waves`` x concurrency requests per
level, at least 4) against one service at a time. Hit rate: ``--systems`` system prompts of ~``--system-words``
words, each asked ``--per-system`` questions at concurrency 8; the share of admitted prompt tokens
the prefix cache supplied (``prefix_cache_hit_tokens_total / scheduler_prompt_tokens_total``,
from /metrics), for `--dp 1`, and `--dp 2` with each ``dp_policy`` (docs/scale-out.md).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from fleet import bench

from minisgl_core.testing.service import RunningService, launch_service

COMMON = ["--max-seq-len-override", "2048"]
SETUPS = {"--dp 1, 2 threads": ["-s", "num_threads=2"],
          "--dp 2, 1 thread each": ["--dp", "2", "-s", "num_threads=2"]}
HIT_SETUPS = {"--dp 1": [], "--dp 2 cache_aware": ["--dp", "2"],
              "--dp 2 round_robin": ["--dp", "2", "-s", "dp_policy=round_robin"]}


def hit_rate(svc: RunningService, systems: int, per_system: int, words: int) -> float:
    """Prefix-cache hit rate of a shared-system-prompt workload (new tokens only)."""
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, action="append")
    ap.add_argument("--waves", type=int, default=2, help="requests per level: waves x c (>= 4)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--systems", type=int, default=8)
    ap.add_argument("--per-system", type=int, default=6)
    ap.add_argument("--system-words", type=int, default=120)
    args = ap.parse_args()
    levels = args.concurrency or [1, 8, 32]
    tmp = Path(tempfile.mkdtemp(prefix="minisgl-dp-"))
    rows: dict[str, list[dict]] = {}
    for name, extra in SETUPS.items():
        svc = launch_service("default", log_dir=tmp, args=[*COMMON, *extra], timeout=600)
        try:
            rows[name] = [r for c in levels for r in bench(
                svc.url, svc.model_name(), [c], max(4, args.waves * c),
                args.max_tokens)]
        finally:
            svc.stop()
    hits: dict[str, float] = {}
    for name, extra in HIT_SETUPS.items():
        svc = launch_service("default", log_dir=tmp, args=[*COMMON, *extra], timeout=600)
        try:
            hits[name] = hit_rate(svc, args.systems, args.per_system, args.system_words)
        finally:
            svc.stop()
    print("| setup | concurrency | output tok/s | TTFT p50 ms | req/s |")
    print("|---|---|---|---|---|")
    for name, out in rows.items():
        for r in out:
            print(f"| {name} | {r['concurrency']} | {r['output_tok_s']:.1f}"
                  f" | {r['ttft_p50_ms']:.0f} | {r['req_s']:.2f} |")
    print("\n| setup | prefix-cache hit rate |\n|---|---|")
    for name, rate in hits.items():
        print(f"| {name} | {rate:.1%} |")
    print(json.dumps({"throughput": rows, "hit_rate": hits}))


if __name__ == "__main__":
    main()
