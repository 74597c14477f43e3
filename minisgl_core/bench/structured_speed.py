"""``minisgl bench structured-speed``: what a grammar costs per token, `minisgl bench serve`'s
load with and without a JSON schema.

Three runs against one service (the default model unless ``--url``), each at concurrency 8:
every request free, every request constrained by SCHEMA (``--extra-body``), and 4 free + 4
constrained clients at the same time (two bench loads sharing the batch). Prints TPOT p50 of each
and the ratios the targets name: constrained / free, and free-beside-constrained / free.

    minisgl bench structured-speed [--url URL] [--requests 16] [--max-tokens 64]
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from minisgl_core.bench.serve import run_serve

SCHEMA = {"type": "object", "properties": {
    "topic": {"type": "string", "maxLength": 60},
    "facts": {"type": "array", "minItems": 3, "maxItems": 8,
              "items": {"type": "string", "maxLength": 160}}},
    "required": ["topic", "facts"]}
CONSTRAINED = {"response_format": {"type": "json_schema", "json_schema": {
    "name": "facts", "schema": SCHEMA}}}


async def measure(url: str, requests: int, max_tokens: int) -> dict[str, Any]:
    def load(concurrency: int, extra: dict[str, Any] | None) -> Any:
        return run_serve(url, [concurrency], requests, max_tokens, progress=False,
                         extra_body=extra)

    (free,) = await load(8, None)
    (constrained,) = await load(8, CONSTRAINED)
    (mixed_free,), (mixed_constrained,) = await asyncio.gather(load(4, None),
                                                               load(4, CONSTRAINED))
    out = {name: r.as_dict() for name, r in (("free", free), ("constrained", constrained),
                                             ("mixed_free", mixed_free),
                                             ("mixed_constrained", mixed_constrained))}
    out["constrained_vs_free_tpot"] = constrained.tpot_p50_ms / free.tpot_p50_ms
    out["free_beside_constrained_vs_free_tpot"] = mixed_free.tpot_p50_ms / free.tpot_p50_ms
    out["mixed_constrained_vs_mixed_free_tpot"] = (mixed_constrained.tpot_p50_ms
                                                   / mixed_free.tpot_p50_ms)
    return out


def structured_speed_command(
    url: Annotated[str | None, typer.Option(
        help="An already running service (default: start one on the default model).")] = None,
    requests: Annotated[int, typer.Option(min=1, help="Requests per load.")] = 16,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request.")] = 64,
) -> None:
    """What a grammar costs per token: TPOT of free, JSON-schema constrained and mixed loads at
    concurrency 8, and their ratios."""
    svc = None
    if url is None:
        from minisgl_core.testing.service import launch_service

        svc = launch_service("default", log_dir=Path(tempfile.mkdtemp()), timeout=600)
        url = svc.url
    try:
        result = asyncio.run(measure(url.rstrip("/"), requests, max_tokens))
    finally:
        if svc is not None:
            svc.stop()
    for name in ("free", "constrained", "mixed_free", "mixed_constrained"):
        r = result[name]
        typer.echo(f"{name:<18} TPOT p50 {r['tpot_p50_ms']:8.1f} ms  p99 {r['tpot_p99_ms']:8.1f}"
                   f" ms  out tok/s {r['output_tok_s']:7.1f}  failures {r['failures']}")
    typer.echo(json.dumps({k: round(v, 3) for k, v in result.items() if k.endswith("_tpot")}))
