"""What the ``minisgl bench`` commands share: usage errors and the checked engine options."""

from __future__ import annotations

import importlib
from typing import Annotated

import typer

from minisgl_core.kernels.schemes import QUANTIZATIONS

EXIT_USAGE = 2  # a bad option: nothing was measured
UNQUANTIZED = ("fp32", "none")  # --quantization values that name no scheme
DTYPES = ("float32", "bfloat16", "auto")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print ``minisgl: error: message`` on stderr and return the Exit to raise."""
    typer.echo(f"minisgl: error: {message}", err=True)
    return typer.Exit(code)


def quantizations(values: list[str]) -> list[str | None]:
    """``--quantization`` values as the engine takes them: fp32 (or none) is None."""
    chosen: list[str | None] = []
    named = ", ".join((UNQUANTIZED[0], *QUANTIZATIONS[:-1])) + f" or {QUANTIZATIONS[-1]}"
    for q in values:
        if q not in (*UNQUANTIZED, *QUANTIZATIONS):
            raise fail(f'--quantization must be {named}, got "{q}"')
        chosen.append(None if q in UNQUANTIZED else q)
    return chosen


def dtypes(values: list[str]) -> list[str]:
    """``--dtype`` values, checked before anything loads (each once, in order)."""
    for d in values:
        if d not in DTYPES:
            raise fail(f'--dtype must be float32, bfloat16 or auto, got "{d}"')
    return list(dict.fromkeys(values))


def extra_needed(module: str, extra: str) -> None:
    """Exit 1 naming the extra to install when ``module`` (a benchmark's client) is missing."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError:
        raise fail(f"this benchmark needs {module}: pip install 'minisgl[{extra}]'", 1) from None
