"""``minisgl bench prefix``: the prefix cache after a restart (prefix_restart) or on chats
sharing a system prompt (prefix_cache)."""

from __future__ import annotations

from typing import Annotated

import typer

from minisgl_core.bench import prefix_cache, prefix_restart
from minisgl_core.bench.options import JsonOpt, dtypes


def prefix_command(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    restart: Annotated[bool, typer.Option(
        "--restart/--chats", help="TTFT of long prompts cold, from RAM and from the disk tier "
        "after a restart (default); or chats sharing a system prompt, radix against naive.")
    ] = True,
    length: Annotated[list[int] | None, typer.Option(
        min=16, help="--restart: prompt lengths in tokens (repeat; default 1024 4096 8192).")
    ] = None,
    directory: Annotated[str | None, typer.Option(
        help="--restart: where the page files go (default: a temporary directory).")] = None,
    drop_caches: Annotated[bool, typer.Option(
        help="--restart: evict the page files from the OS page cache before the disk runs.")
    ] = False,
    repeat: Annotated[int, typer.Option(
        min=1, help="--restart: RAM and disk runs per prompt; the best counts.")] = 3,
    requests: Annotated[int, typer.Option(min=1, help="--chats: distinct user turns.")] = 32,
    system_tokens: Annotated[int, typer.Option(
        min=1, help="--chats: length of the shared system prompt in tokens.")] = 500,
    max_tokens: Annotated[int, typer.Option(
        min=1, help="--chats: tokens generated per request.")] = 8,
    arrival: Annotated[list[str] | None, typer.Option(
        help="--chats: sequential or burst (repeat; default both).")] = None,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or auto.")] = "float32",
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    json_: JsonOpt = False,
) -> None:
    """The prefix cache: after a restart, from its disk tier (--restart), or on chats (--chats);
    exit 1 if the cache changed a greedy output."""
    dtypes([dtype])
    for name in arrival or []:
        if name not in prefix_cache.ARRIVALS:
            raise typer.BadParameter(f'must be sequential or burst, got "{name}"',
                                     param_hint="--arrival")
    if not restart:
        raise typer.Exit(prefix_cache.main(
            model=model, requests=requests, system_tokens=system_tokens, max_tokens=max_tokens,
            arrivals=arrival or prefix_cache.ARRIVALS, threads=threads, json_lines=json_))
    raise typer.Exit(prefix_restart.main(
        model=model, lengths=length or [1024, 4096, 8192], threads=threads, dtype=dtype,
        directory=directory, drop_caches=drop_caches, repeat=repeat, json_lines=json_))
