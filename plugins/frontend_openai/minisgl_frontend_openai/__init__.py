"""minisgl plugin: the OpenAI-compatible HTTP frontend (registers nothing yet)."""

from __future__ import annotations

from minisgl_core import hookimpl
from minisgl_core.hookspecs import Register


@hookimpl
def minisgl_register_frontends(register: Register) -> None:
    """The "openai" frontend will be registered here once it exists."""
