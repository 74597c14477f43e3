"""``minisgl bench rss``: resident memory of every process of a launched service, after it
served each kind of call.

Starts `minisgl launch` on a free port, waits for /health, then sends a chat request, a
/tokenize of a chat with tools and a /detokenize, loads the page and its /v1/engine/info, and
sends a chat request with tools; then prints each process's RSS (psutil), whether it maps
libtorch or the tokenizers library, and the total; stops the service.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def exercise(url: str) -> None:
    """One call of each kind a frontend serves: chat, /tokenize, /detokenize, the page, tools."""
    import httpx

    calls = [("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8,
                                               "temperature": 0}),
             ("POST", "/tokenize", {"messages": MESSAGES, "tools": TOOLS}),
             ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
             ("GET", "/", None), ("GET", "/v1/engine/info", None),
             ("POST", "/v1/chat/completions", {"messages": MESSAGES, "tools": TOOLS,
                                               "max_tokens": 8, "temperature": 0})]
    for method, path, body in calls:
        httpx.request(method, url + path, json=body, timeout=300).raise_for_status()


def measure(model: str, args: list[str]) -> list[dict[str, Any]]:
    """One row per process of the service (the launcher first)."""
    import psutil

    from minisgl_core.testing.service import launch_service

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


def rss_command(
    model: Annotated[str, typer.Option(help="Model directory or name.")] = "default",
    json_: Annotated[bool, typer.Option("--json", help="One JSON object per process.")] = False,
    launch_args: Annotated[list[str] | None, typer.Argument(
        help="Extra `minisgl launch` arguments (after --).")] = None,
) -> None:
    """Resident memory of every process of a launched service after it served each kind of
    call (chat, tokenize, detokenize, the page, tools), and the total."""
    table = measure(model, launch_args or [])
    for row in table:
        typer.echo(json.dumps(row) if json_ else
                   f"{row['process']:48s} {row['rss_mib']:8.1f} MiB  libtorch={row['libtorch']}"
                   f"  tokenizers={row['tokenizers']}")
    total = sum(float(r["rss_mib"]) for r in table)
    typer.echo(json.dumps({"total_rss_mib": round(total, 1)}) if json_ else
               f"{'total':48s} {total:8.1f} MiB")
