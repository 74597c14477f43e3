"""minisgl plugin: the OpenAI-compatible HTTP frontend (FastAPI + uvicorn), registered as "openai",
and the ``minisgl chat`` command.

Light on purpose: FastAPI and uvicorn are imported only when the frontend is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minisgl_core.api import Register, hookimpl

if TYPE_CHECKING:
    import typer


@hookimpl
def minisgl_register_frontends(register: Register) -> None:
    """Register the "openai" frontend (``OpenAIFrontend(client, config, options)``), the one a
    service serves when no frontend is named."""
    register("openai", "minisgl_frontend_openai.server:OpenAIFrontend", default=True)


@hookimpl
def minisgl_register_commands(app: typer.Typer) -> None:
    """Add ``minisgl chat``."""
    from minisgl_frontend_openai.chat_cli import add_commands

    add_commands(app)
