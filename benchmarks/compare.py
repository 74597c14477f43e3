"""Compare the transports end to end and the offline engine (`minisgl bench compare`)."""

from __future__ import annotations

import typer

from minisgl_core.bench.compare import compare_command

if __name__ == "__main__":
    typer.run(compare_command)
