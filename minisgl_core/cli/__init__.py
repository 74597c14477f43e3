"""The `minisgl` command line: the typer app and what its commands share."""

from __future__ import annotations

from minisgl_core import deprecated

# minisgl_core.cli was one module before it became this package: its names still resolve
__getattr__ = deprecated.forwarder(__name__)
