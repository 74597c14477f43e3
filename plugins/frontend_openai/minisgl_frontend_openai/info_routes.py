"""GET /health, /metrics, /openapi.json, /v1/models and /v1/models/{model}."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from minisgl_core.api import __version__
from minisgl_frontend_openai.context import context_of, unavailable
from minisgl_frontend_openai.metrics import CONTENT_TYPE
from minisgl_frontend_openai.openapi import openapi_document

log = logging.getLogger("minisgl_frontend_openai.app")


async def health(request: Request) -> Response:
    if not context_of(request).client.healthy():
        raise unavailable()
    return JSONResponse({"status": "ok"})


async def prometheus(request: Request) -> Response:
    ctx = context_of(request)
    try:
        engine = ctx.client.metrics()
    except Exception:  # noqa: BLE001 - /metrics must answer even when the engine cannot
        log.exception("engine metrics unavailable")
        engine = {}
    return Response(ctx.metrics.render(engine), media_type=CONTENT_TYPE)


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi_document)


async def list_models(request: Request) -> Response:
    ctx = context_of(request)
    return JSONResponse({"object": "list", "data": [ctx.model_card(n) for n in ctx.served_names()]})


async def get_model(request: Request, model: str) -> Response:
    ctx = context_of(request)
    answering = ctx.check_model(model)  # with accept_any_model, an unknown name gets this one's
    return JSONResponse(ctx.model_card(model if model in ctx.served_names() else answering))


def add_info_routes(app: FastAPI) -> None:
    """Register the routes (they find their AppContext in ``app.state.ctx``)."""
    app.state.openapi_document = openapi_document(__version__)
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/metrics", prometheus, methods=["GET"])
    app.add_api_route("/openapi.json", openapi, methods=["GET"])
    app.add_api_route("/v1/models", list_models, methods=["GET"])
    app.add_api_route("/v1/models/{model:path}", get_model, methods=["GET"])
