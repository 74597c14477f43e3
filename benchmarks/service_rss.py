"""Resident memory of every process of a launched service, after one chat request.

    python benchmarks/service_rss.py [--model DIR] [--json] [-- extra minisgl launch args]

Starts `minisgl launch` on a free port, waits for /health, answers one chat request, then
prints each process's RSS (psutil), whether it maps libtorch, and the total; stops the service.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import httpx
import psutil

from minisgl_core.testing.service import launch_service


def measure(model: str, args: list[str]) -> list[dict[str, object]]:
    """One row per process of the service (the launcher first)."""
    with tempfile.TemporaryDirectory() as logs:
        svc = launch_service(model, args=args, log_dir=Path(logs))
        try:
            httpx.post(f"{svc.url}/v1/chat/completions", timeout=300, json={
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "max_tokens": 8, "temperature": 0}).raise_for_status()
            launcher = psutil.Process(svc.proc.pid)
            rows = []
            for proc in [launcher, *launcher.children(recursive=True)]:
                maps = Path(f"/proc/{proc.pid}/maps")
                rows.append({"process": " ".join(proc.cmdline())[:48],
                             "rss_mib": round(proc.memory_info().rss / 2**20, 1),
                             "libtorch": "libtorch" in maps.read_text() if maps.exists() else None})
            return rows
        finally:
            svc.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="model directory (default: SmolLM2)")
    parser.add_argument("--json", action="store_true", help="one JSON object per process")
    parser.add_argument("launch_args", nargs="*", help="extra `minisgl launch` arguments")
    ns = parser.parse_args()
    table = measure(ns.model, ns.launch_args)
    for row in table:
        print(json.dumps(row) if ns.json else
              f"{row['process']:48s} {row['rss_mib']:8.1f} MiB  libtorch={row['libtorch']}")
    total = sum(float(r["rss_mib"]) for r in table)  # type: ignore[arg-type]
    print(json.dumps({"total_rss_mib": round(total, 1)}) if ns.json else
          f"{'total':48s} {total:8.1f} MiB")
