"""minisgl plugin: the OpenAI-compatible HTTP frontend (FastAPI + uvicorn), registered as "openai".

Light on purpose: FastAPI and uvicorn are imported only when the frontend is built.
"""

from __future__ import annotations

from minisgl_core import hookimpl
from minisgl_core.hookspecs import Register


@hookimpl
def minisgl_register_frontends(register: Register) -> None:
    """Register the "openai" frontend (``OpenAIFrontend(client, config, options)``)."""
    register("openai", "minisgl_frontend_openai.server:OpenAIFrontend")
