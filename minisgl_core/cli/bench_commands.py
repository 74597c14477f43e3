"""``minisgl bench``: every benchmark command, each defined beside its benchmark in
``minisgl_core.bench`` (heavy libraries imported only when one runs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from minisgl_core.bench.compare import compare_command
from minisgl_core.bench.engine_vs_hf import offline_command
from minisgl_core.bench.fleet import fleet_command
from minisgl_core.bench.fleet_dp import dp_command
from minisgl_core.bench.perplexity_http import perplexity_command
from minisgl_core.bench.prefix import prefix_command
from minisgl_core.bench.quality import quality_command
from minisgl_core.bench.serve_cli import serve_command
from minisgl_core.bench.service_rss import rss_command
from minisgl_core.bench.speculative import speculative_command
from minisgl_core.bench.structured import structured_command
from minisgl_core.bench.structured_speed import structured_speed_command
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
    "perplexity": perplexity_command,
    "rss": rss_command,
    "structured": structured_command,
    "structured-speed": structured_speed_command,
    "fleet": fleet_command,
    "dp": dp_command,
}


def bench_app() -> typer.Typer:
    """The ``minisgl bench`` group, one command per entry of COMMANDS."""
    app = typer.Typer(no_args_is_help=True, help="Benchmarks.")
    for name, command in COMMANDS.items():
        app.command(name)(command)
    return app
