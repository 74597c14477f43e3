"""Every error as OpenAI's envelope: rejections, API errors, unknown routes, bad bodies, crashes."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from minisgl_core.api import EngineUnavailable, RequestRejected
from minisgl_frontend_openai.anthropic_errors import (
    anthropic_envelope,
    anthropic_status,
    is_messages_path,
)
from minisgl_frontend_openai.context import CLIENT_CLOSED_REQUEST, unavailable
from minisgl_frontend_openai.errors import APIError, bad_request, rejected

log = logging.getLogger("minisgl_frontend_openai.app")


async def api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return JSONResponse(exc.envelope(), status_code=exc.status)


async def rejection(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestRejected)
    err = rejected(exc)
    return JSONResponse(err.envelope(), status_code=err.status)


async def engine_unavailable(_: Request, __: Exception) -> Response:
    err = unavailable()  # e.g. /tokenize while the engine is down
    return JSONResponse(err.envelope(), status_code=err.status)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        err = APIError(404, f"no route {request.method} {request.url.path[:100]}",
                       code="not_found")
    elif exc.status_code == 405:
        err = APIError(405, f"method {request.method} is not allowed here",
                       code="method_not_allowed")
    else:
        err = APIError(exc.status_code, str(exc.detail))
    if is_messages_path(request.url.path):  # Anthropic's clients read Anthropic's envelope
        return JSONResponse(anthropic_envelope(err), status_code=anthropic_status(err),
                            headers=exc.headers)
    return JSONResponse(err.envelope(), status_code=err.status, headers=exc.headers)


async def validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    param = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "path"))
    err = rejected(bad_request(f"Invalid value for '{param}': {first.get('msg')}",
                               param=param or None))
    return JSONResponse(err.envelope(), status_code=err.status)


async def gone_while_reading(_: Request, __: Exception) -> Response:
    return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody is there to read it


async def internal_error(_: Request, exc: Exception) -> Response:
    log.exception("unhandled error in the OpenAI frontend")
    err = APIError(500, f"internal error: {type(exc).__name__}", type="server_error")
    return JSONResponse(err.envelope(), status_code=500)


def add_error_handlers(app: FastAPI) -> None:
    """Install the handlers, most specific first."""
    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(RequestRejected, rejection)  # every check's 400 (404: the model)
    app.add_exception_handler(EngineUnavailable, engine_unavailable)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(ClientDisconnect, gone_while_reading)
    app.add_exception_handler(Exception, internal_error)
