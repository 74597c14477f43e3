"""Resident memory of every process of a launched service, after it served each kind of call.

    python benchmarks/service_rss.py [--model DIR] [--json] [-- extra minisgl launch args]

Starts `minisgl launch` on a free port, waits for /health, then sends a chat request, a
/tokenize of a chat with tools and a /detokenize, loads the page and its /v1/engine/info, and
sends a chat request with tools; then prints each process's RSS (psutil), whether it maps
libtorch or the tokenizers library, and the total; stops the service.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import httpx
import psutil

from minisgl_core.testing.service import launch_service

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def exercise(url: str) -> None:
    """One call of each kind a frontend serves: chat, /tokenize, /detokenize, the page, tools."""
    calls = [("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8,
                                               "temperature": 0}),
             ("POST", "/tokenize", {"messages": MESSAGES, "tools": TOOLS}),
             ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
             ("GET", "/", None), ("GET", "/v1/engine/info", None),
             ("POST", "/v1/chat/completions", {"messages": MESSAGES, "tools": TOOLS,
                                               "max_tokens": 8, "temperature": 0})]
    for method, path, body in calls:
        httpx.request(method, url + path, json=body, timeout=300).raise_for_status()


def measure(model: str, args: list[str]) -> list[dict[str, object]]:
    """One row per process of the service (the launcher first)."""
    with tempfile.TemporaryDirectory() as logs:
        svc = launch_service(model, args=args, log_dir=Path(logs))
        try:
            exercise(svc.url)
            launcher = psutil.Process(svc.proc.pid)
            rows = []
            for proc in [launcher, *launcher.children(recursive=True)]:
                maps = Path(f"/proc/{proc.pid}/maps")
                mapped = maps.read_text() if maps.exists() else None
                rows.append({"process": " ".join(proc.cmdline())[:48],
                             "rss_mib": round(proc.memory_info().rss / 2**20, 1),
                             "libtorch": None if mapped is None else "libtorch" in mapped,
                             "tokenizers": None if mapped is None else "/tokenizers/" in mapped})
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
              f"{row['process']:48s} {row['rss_mib']:8.1f} MiB  libtorch={row['libtorch']}"
              f"  tokenizers={row['tokenizers']}")
    total = sum(float(r["rss_mib"]) for r in table)  # type: ignore[arg-type]
    print(json.dumps({"total_rss_mib": round(total, 1)}) if ns.json else
          f"{'total':48s} {total:8.1f} MiB")
