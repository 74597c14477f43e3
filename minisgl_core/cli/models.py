"""``minisgl models``: what the caches hold that minisgl can serve, ``minisgl models rm`` and
``minisgl models dummy`` (random weights at a public model's shapes)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from minisgl_core.cli.common import JsonOpt, fail, state

app = typer.Typer(help="Models in the caches: the Hugging Face cache and converted GGUFs.")


def _size(n: int) -> str:
    """Bytes as people read them: 541.6 MB."""
    value = float(n)
    for unit in ("B", "KB", "MB"):
        if value < 1000:
            return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


@app.callback(invoke_without_command=True)
def models(ctx: typer.Context, json_: JsonOpt = False) -> None:
    """List cached models minisgl can serve: name, kind, architecture, size, where."""
    if ctx.invoked_subcommand is not None:
        return
    from minisgl_core.store.listing import cached_models

    found = cached_models(state(ctx).regs.models.names())
    if json_:
        typer.echo(json.dumps([m.as_dict() for m in found], indent=2))
        return
    if not found:
        typer.echo("no cached models (minisgl launch --model ORG/NAME fetches one)")
        return
    rows = [("name", "kind", "architecture", "size", "from / commit", "path")]
    rows += [(m.name, m.kind, m.architecture, _size(m.size_bytes), m.detail, str(m.path))
             for m in found]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])


@app.command("rm")
def rm(ctx: typer.Context, name: Annotated[str, typer.Argument(
        help="A name `minisgl models` lists (a Hub repo goes with every revision).")]) -> None:
    """Remove a cached model: its Hub repo (shared with other tools) or converted GGUF."""
    from minisgl_core.store.listing import cached_models, remove

    names = state(ctx).regs.models.names()
    gone = remove(name, names)
    if not gone:
        known = sorted({m.name for m in cached_models(names)})
        raise fail(f"no cached model {name!r} (cached: {', '.join(known) or 'none'})", 1)
    for m in gone:
        typer.echo(f"removed {m.name} ({m.kind}, {_size(m.size_bytes)}): {m.path}")


@app.command("dummy")
def dummy(name: Annotated[str, typer.Argument(
        help="A public config (Qwen3-0.6B, Qwen3-1.7B, Qwen3-4B, Llama-3.2-1B, Llama-3.2-3B) "
             "or a config.json's path.")],
          gguf: Annotated[bool, typer.Option(
              "--gguf", help="Also write the F16 GGUF of the same weights; print its path.")
          ] = False) -> None:
    """Write a model of random weights at NAME's shapes once (cached); print its directory."""
    from minisgl_core.store.dummy_models import ensure_dummy_gguf, ensure_dummy_model
    from minisgl_core.store.errors import ModelNotFoundError

    try:
        path = ensure_dummy_gguf(name) if gguf else ensure_dummy_model(name)
    except (ModelNotFoundError, ValueError) as exc:
        raise fail(str(exc), 1) from None
    typer.echo(str(path))
