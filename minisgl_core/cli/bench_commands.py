"""``minisgl bench``: every benchmark command, each defined beside its benchmark in
``minisgl_core.bench`` (heavy libraries imported only when one runs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from minisgl_core.bench.compare import compare_command
from minisgl_core.bench.engine_vs_hf import offline_command
from minisgl_core.bench.prefix import prefix_command
from minisgl_core.bench.quality import quality_command
from minisgl_core.bench.serve import serve_command
from minisgl_core.bench.speculative import speculative_command
from minisgl_core.bench.transport import transport_command
from minisgl_core.bench.wo_kernels import kernels_command

COMMANDS: dict[str, Callable[..., Any]] = {
    "transport": transport_command,
    "offline": offline_command,
    "quality": quality_command,
    "speculative": speculative_command,
    "kernels": kernels_command,
    "prefix": prefix_command,
    "serve": serve_command,
    "compare": compare_command,
}


def bench_app() -> typer.Typer:
    """The ``minisgl bench`` group, one command per entry of COMMANDS."""
    app = typer.Typer(no_args_is_help=True, help="Benchmarks.")
    for name, command in COMMANDS.items():
        app.command(name)(command)
    return app
