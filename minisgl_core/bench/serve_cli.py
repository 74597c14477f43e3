"""`minisgl bench serve`'s command line: the table or JSON lines it prints, and its options."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from minisgl_core.bench.results import ServeResult, markdown_table
from minisgl_core.bench.serve import run_serve

TABLE_HEADERS = ("concurrency", "requests", "failures", "out tok/s", "req/s", "TTFT p50 ms",
                 "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "E2E p50 ms", "E2E p99 ms")


def table_row(r: ServeResult) -> list[object]:
    return [r.concurrency, r.requests, r.failures, r.output_tok_s, r.req_s, r.ttft_p50_ms,
            r.ttft_p99_ms, r.tpot_p50_ms, r.tpot_p99_ms, r.e2e_p50_ms, r.e2e_p99_ms]


def main(url: str, concurrency: list[int], requests: int | None, max_tokens: int,
         json_lines: bool, model: str | None = None, prompt_len: int | None = None,
         duration_limit_s: float = 300.0, api_key: str | None = None,
         progress: bool = True, extra_body: dict[str, Any] | None = None,
         request_rate: float | None = None) -> list[dict[str, Any]]:
    """Run the load, print a table (or one JSON line per level), return the levels as dicts."""
    results = asyncio.run(run_serve(url, concurrency, requests, max_tokens, model=model,
                                    prompt_len=prompt_len, duration_limit_s=duration_limit_s,
                                    api_key=api_key, progress=progress,
                                    extra_body=extra_body, request_rate=request_rate))
    dicts = [r.as_dict() for r in results]
    if json_lines:
        for d in dicts:
            print(json.dumps(d), flush=True)
    else:
        print(markdown_table(TABLE_HEADERS, [table_row(r) for r in results]))
        if request_rate is not None:
            print(f"(requests sent at {request_rate:g}/s, Poisson arrivals, at most the level's "
                  "concurrency in flight)")
        if results and not results[0].ignore_eos:
            print("(the server refused ignore_eos: requests may stop before max_tokens)")
    return dicts


def json_object(text: str | None) -> dict[str, Any] | None:
    """``--extra-body``'s value parsed: a JSON object, or BadParameter saying why not."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--extra-body") from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--extra-body")
    return value


def serve_command(
    url: Annotated[str, typer.Option(help="Base URL of an OpenAI-compatible server.")] = (
        "http://127.0.0.1:8000"),
    concurrency: Annotated[list[int] | None, typer.Option(
        help="Requests in flight at once, repeat for several levels (default: 1, 8, 32).")] = None,
    requests: Annotated[int | None, typer.Option(
        help="Requests per level (default: 2 x concurrency, at least 8).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 64,
    model: Annotated[str | None, typer.Option(help="Model name (default: /v1/models).")] = None,
    prompt_len: Annotated[int | None, typer.Option(
        help="Pad the prompt to about this many words (default: a short question).")] = None,
    duration_limit: Annotated[float, typer.Option(
        help="Seconds per level after which no new request starts.")] = 300.0,
    api_key: Annotated[str | None, typer.Option(envvar="OPENAI_API_KEY",
                                                help="Bearer token.")] = None,
    json_: Annotated[bool, typer.Option("--json", help="One JSON line per level.")] = False,
    extra_body: Annotated[str | None, typer.Option(
        help='JSON object merged into every request, e.g. \'{"response_format": '
             '{"type": "json_object"}}\' or \'{"temperature": 1.0}\' (requests are greedy '
             'without it).')] = None,
    request_rate: Annotated[float | None, typer.Option(
        min=0.001, help="Requests a second, sent at random (Poisson) times, the level's "
        "concurrency the most in flight (default: a new request as soon as one ends).")] = None,
) -> None:
    """Load an OpenAI-compatible server with streaming chat requests and report latency and
    throughput per concurrency level."""
    import aiohttp

    extra = json_object(extra_body)
    try:
        results = main(url, concurrency or [1, 8, 32], requests, max_tokens, json_, model,
                       prompt_len, duration_limit, api_key, extra_body=extra,
                       request_rate=request_rate)
    except (aiohttp.ClientError, RuntimeError) as exc:
        typer.echo(f"minisgl: error: {url}: {exc}", err=True)
        raise typer.Exit(1) from None
    failed = sum(r["failures"] for r in results)
    if failed:
        typer.echo(f"minisgl: {failed} request(s) failed", err=True)
        raise typer.Exit(1)
