"""The FastAPI application: OpenAI routes, /health, /metrics, error envelopes and middleware."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from minisgl_core import __version__
from minisgl_core.engine_client import EngineClient
from minisgl_core.wire.schema import GenerateRequest
from minisgl_frontend_openai.echo import completion_format
from minisgl_frontend_openai.errors import APIError, bad_request
from minisgl_frontend_openai.generation import Generation
from minisgl_frontend_openai.metrics import CONTENT_TYPE, FrontendMetrics
from minisgl_frontend_openai.middleware import ApiKeyMiddleware, BodyLimitMiddleware
from minisgl_frontend_openai.openapi import openapi_document
from minisgl_frontend_openai.responses import CompletionFormat
from minisgl_frontend_openai.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    for_choice,
    parse,
)
from minisgl_frontend_openai.sse import (
    DONE,
    ClientDisconnected,
    SSEResponse,
    frame,
    race_disconnect,
)
from minisgl_frontend_openai.structured import with_structured
from minisgl_frontend_openai.tokenize_routes import LazyTokenizer, add_tokenize_routes
from minisgl_frontend_openai.tool_format import chat_format
from minisgl_frontend_openai.tools import prepare_tools
from minisgl_frontend_openai.ui import UI_PATHS

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
CLIENT_CLOSED_REQUEST = 499  # never seen by anyone: the client is gone (nginx's convention)


def build_app(client: EngineClient, *, api_key: str | None = None,
              max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, model_aliases: Iterable[str] = (),
              metrics_require_key: bool = False,
              metrics: FrontendMetrics | None = None, served_model_names: Sequence[str] = (),
              tokenizer: Callable[[], Any] | None = None) -> FastAPI:
    """An OpenAI-compatible app serving ``client``; ``app.state.metrics`` is its FrontendMetrics.

    ``served_model_names`` (``--served-model-name``) replace the engine's model name: the first
    is reported, each is accepted. ``tokenizer`` loads a TokenizerRole for /tokenize.
    """
    app = FastAPI(title="minisgl", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics = metrics or FrontendMetrics()
    app.state.live = live = set[Generation]()  # generations not yet closed (empty when idle)
    aliases = tuple(model_aliases)
    started = int(time.time())

    def served_names() -> list[str]:
        primary = tuple(served_model_names) or (client.model_name,)
        return list(dict.fromkeys((*primary, *aliases)))

    def check_model(name: str | None) -> str:
        names = served_names()
        if name is not None and name not in names:
            raise APIError(404, f"The model '{name[:100]}' does not exist",
                           param="model", code="model_not_found")
        return names[0]

    def model_card(name: str) -> dict[str, object]:
        return {"id": name, "object": "model", "created": started, "owned_by": "minisgl",
                "max_model_len": client.max_context}

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.envelope(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            err = APIError(404, f"no route {request.method} {request.url.path[:100]}",
                           code="not_found")
        elif exc.status_code == 405:
            err = APIError(405, f"method {request.method} is not allowed here",
                           code="method_not_allowed")
        else:
            err = APIError(exc.status_code, str(exc.detail))
        return JSONResponse(err.envelope(), status_code=err.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "path"))
        err = bad_request(f"Invalid value for '{param}': {first.get('msg')}", param=param or None)
        return JSONResponse(err.envelope(), status_code=400)

    @app.exception_handler(ClientDisconnect)
    async def _gone_while_reading(_: Request, __: ClientDisconnect) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody is there to read it

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in the OpenAI frontend")
        err = APIError(500, f"internal error: {type(exc).__name__}", type="server_error")
        return JSONResponse(err.envelope(), status_code=500)

    @app.get("/health")
    async def health() -> Response:
        if not client.healthy():
            raise _unavailable()
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def prometheus() -> Response:
        try:
            engine = client.metrics()
        except Exception:  # noqa: BLE001 - /metrics must answer even when the engine cannot
            log.exception("engine metrics unavailable")
            engine = {}
        return Response(metrics.render(engine), media_type=CONTENT_TYPE)

    document = openapi_document(__version__)

    @app.get("/openapi.json")
    async def openapi() -> Response:
        return JSONResponse(document)

    @app.get("/v1/models")
    async def list_models() -> Response:
        return JSONResponse({"object": "list", "data": [model_card(n) for n in served_names()]})

    @app.get("/v1/models/{model:path}")
    async def get_model(model: str) -> Response:
        check_model(model)
        return JSONResponse(model_card(model))

    if tokenizer is not None:
        add_tokenize_routes(app, LazyTokenizer(tokenizer), owner=client.frontend_id,
                            check_model=check_model, max_context=lambda: client.max_context)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = parse(ChatCompletionRequest, await request.body())
        model = check_model(req.model)
        sampling = await with_structured(req.model_extra, req.sampling(client.max_context))
        tools, sampling = await prepare_tools(req.model_extra, sampling)
        messages = req.chat_messages()
        rid = uuid.uuid4().hex
        now = time.time()
        engine_requests = [
            GenerateRequest(request_id=f"chatcmpl-{rid}-{j}", owner=client.frontend_id,
                            sampling=for_choice(sampling, j), messages=messages, arrival_time=now,
                            tools=tools.template_json if tools else None)
            for j in range(req.choices_per_prompt)]
        fmt = chat_format(tools, prompt_logprobs=req.prompt_logprobs,
                          response_id=f"chatcmpl-{rid}", model=model, created=int(now),
                          include_usage=req.include_usage,
                          return_token_ids=bool(req.return_token_ids),
                          logprobs=sampling.logprobs is not None)
        return await _answer(request, engine_requests, fmt, req.choices_per_prompt,
                             bool(req.stream))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = parse(CompletionRequest, await request.body())
        model = check_model(req.model)
        sampling = await with_structured(req.model_extra, req.sampling(client.max_context))
        prompts = req.prompts()
        n = req.choices_per_prompt
        rid = uuid.uuid4().hex
        now = time.time()
        engine_requests = []
        for p, prompt in enumerate(prompts):
            for j in range(n):
                text, ids = (prompt, None) if isinstance(prompt, str) else (None, prompt)
                engine_requests.append(GenerateRequest(
                    request_id=f"cmpl-{rid}-{p * n + j}", owner=client.frontend_id,
                    sampling=for_choice(sampling, j), prompt=text, token_ids=ids,
                    arrival_time=now))
        fmt = completion_format(req, prompts, response_id=f"cmpl-{rid}", model=model,
                                created=int(now), include_usage=req.include_usage,
                                return_token_ids=bool(req.return_token_ids),
                                logprobs=sampling.logprobs is not None)
        return await _answer(request, engine_requests, fmt, n, bool(req.stream))

    async def _answer(request: Request, engine_requests: Sequence[GenerateRequest],
                      fmt: CompletionFormat, group_size: int, stream: bool) -> Response:
        if not client.healthy():
            raise _unavailable()
        gen = Generation(client, engine_requests, metrics, group_size=group_size)
        gen.start()
        live.add(gen)

        async def close() -> None:
            live.discard(gen)
            await gen.aclose()

        try:
            # the first delta of every choice comes before any header, so errors found while
            # tokenizing (prompt too long, bad token ids) still get a 4xx status
            await race_disconnect(request.receive, gen.prelude())
            if stream:
                return SSEResponse(_stream_body(gen, fmt, len(engine_requests)),
                                   on_close=close)
            await race_disconnect(request.receive, gen.collect())
        except ClientDisconnected:
            await close()
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except BaseException:
            await close()
            raise
        await close()
        return JSONResponse(fmt.full(gen.choices, gen.usage()))

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


async def _stream_body(gen: Generation, fmt: CompletionFormat, n: int) -> AsyncIterator[bytes]:
    try:
        for chunk in fmt.first_chunks(n):
            yield frame(chunk)
        async for index, delta in gen.events():
            for chunk in fmt.delta_chunks(index, delta):
                yield frame(chunk)
        if fmt.include_usage:
            yield frame(fmt.usage_chunk(gen.usage()))
    except APIError as err:
        # the status line is gone: report the failure in-band, never as a normal finish
        yield frame(err.envelope())
    except Exception as exc:  # noqa: BLE001
        log.exception("stream failed")
        yield frame(APIError(500, f"internal error: {type(exc).__name__}",
                             type="server_error").envelope())
    yield DONE


def _unavailable() -> APIError:
    return APIError(503, "the engine is not ready or not running", type="server_error",
                    code="engine_unavailable")
