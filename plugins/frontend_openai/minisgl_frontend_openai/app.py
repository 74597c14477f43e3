"""The FastAPI application: OpenAI routes, /health, /metrics, error envelopes and middleware.

The handlers live in their own modules (``info_routes``, ``generate_routes``,
``tokenize_routes``, ``error_handlers``) and find what they share in ``app.state.ctx``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from fastapi import FastAPI

from minisgl_core.api import EngineClient
from minisgl_frontend_openai.anthropic_routes import add_anthropic_routes
from minisgl_frontend_openai.context import AppContext
from minisgl_frontend_openai.error_handlers import add_error_handlers
from minisgl_frontend_openai.errors import APIError
from minisgl_frontend_openai.generate_routes import add_generate_routes
from minisgl_frontend_openai.generation import Generation
from minisgl_frontend_openai.info_routes import add_info_routes
from minisgl_frontend_openai.metrics import FrontendMetrics
from minisgl_frontend_openai.middleware import ApiKeyMiddleware, BodyLimitMiddleware
from minisgl_frontend_openai.response_store import ResponseStore
from minisgl_frontend_openai.responses_api import add_responses_routes
from minisgl_frontend_openai.router_routes import add_router_routes
from minisgl_frontend_openai.tokenize_routes import add_tokenize_routes
from minisgl_frontend_openai.ui import UI_PATHS

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


def build_app(client: EngineClient, *, api_key: str | None = None,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, model_aliases: Iterable[str] = (),
              metrics_require_key: bool = False,
              metrics: FrontendMetrics | None = None,
              served_model_names: Sequence[str] = (), sglang_metrics: bool = False,
              response_store: ResponseStore | None = None,
              model_path: str | None = None, accept_any_model: bool = False,
              reasoning_end: str | None = None) -> FastAPI:
    """An OpenAI-compatible app serving ``client``; ``app.state.metrics`` is its FrontendMetrics.

    ``served_model_names`` (``--served-model-name``) replace the engine's model name: the first
    is reported, each is accepted. ``sglang_metrics`` adds SGLang's gauge names to /metrics;
    ``model_path`` (``--model``) is what /server_info and /model_info report;
    ``accept_any_model`` answers a request naming any model (reporting the first served name);
    ``reasoning_end`` is what ends a reasoning model's thinking (``--reasoning-parser``).
    """
    app = FastAPI(title="minisgl", docs_url=None, redoc_url=None, openapi_url=None)
    ctx = AppContext(client=client, metrics=metrics or FrontendMetrics(sglang_names=sglang_metrics),
                     started=int(time.time()), served_model_names=tuple(served_model_names),
                     aliases=tuple(model_aliases), accept_any_model=accept_any_model,
                     reasoning_end=reasoning_end)
    app.state.ctx = ctx
    app.state.metrics = ctx.metrics
    app.state.live = ctx.live  # generations not yet closed (empty when idle)
    add_error_handlers(app)
    add_info_routes(app)
    add_router_routes(app, model_path)
    add_tokenize_routes(app, client, check_model=ctx.check_model)
    add_generate_routes(app)
    # /v1/responses: stored answers under the cache directory unless told otherwise
    add_responses_routes(app, response_store or ResponseStore())
    add_anthropic_routes(app)  # /v1/messages: Anthropic's Messages API on the chat path
    if api_key:
        open_paths = ["/health"] if metrics_require_key else ["/health", "/metrics"]
        open_paths += UI_PATHS  # the page itself; it sends the key with every API call
        app.add_middleware(ApiKeyMiddleware, api_key=api_key, open_paths=open_paths)
    # added last = outermost: oversized bodies are refused before anything else reads them
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes)
    return app


def fail_in_flight(app: FastAPI, message: str) -> int:
    """End every in-flight answer with a 503 / error event; returns how many there were."""
    error = APIError(503, message, type="server_error", code="shutting_down")
    live: set[Generation] = app.state.live
    for gen in list(live):
        gen.fail(error)
    return len(live)
