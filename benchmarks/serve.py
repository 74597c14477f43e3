"""Load an OpenAI-compatible server (same as `minisgl bench serve`)."""

from __future__ import annotations

import typer

from minisgl_core.bench.serve import serve_command

if __name__ == "__main__":
    typer.run(serve_command)
