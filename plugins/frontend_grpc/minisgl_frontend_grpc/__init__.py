"""minisgl plugin: the gRPC frontend (grpcio, grpc.aio), registered as "grpc".

Light on purpose: grpc and the generated stubs are imported only when the frontend is built or
the ``grpc-generate`` command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minisgl_core.api import Register, hookimpl

if TYPE_CHECKING:
    import typer


@hookimpl
def minisgl_register_frontends(register: Register) -> None:
    """Register the "grpc" frontend (``GrpcFrontend(client, config, options)``)."""
    register("grpc", "minisgl_frontend_grpc.server:GrpcFrontend")


@hookimpl
def minisgl_register_commands(app: typer.Typer) -> None:
    """Add ``minisgl grpc-generate``."""
    from minisgl_frontend_grpc.cli import add_commands

    add_commands(app)
