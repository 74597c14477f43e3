"""POST /v1/chat/completions and /v1/completions: parse, build engine requests, answer whole or
streamed."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from minisgl_core.api import GenerateRequest
from minisgl_frontend_openai.answering import run_generation
from minisgl_frontend_openai.body import parse
from minisgl_frontend_openai.context import (
    AppContext,
    context_of,
)
from minisgl_frontend_openai.echo import completion_format
from minisgl_frontend_openai.errors import APIError
from minisgl_frontend_openai.generation import Generation
from minisgl_frontend_openai.responses import CompletionFormat
from minisgl_frontend_openai.schemas import ChatCompletionRequest, CompletionRequest, for_choice
from minisgl_frontend_openai.sse import (
    DONE,
    frame,
)
from minisgl_frontend_openai.structured import with_structured
from minisgl_frontend_openai.tool_format import chat_format
from minisgl_frontend_openai.tools import prepare_tools

log = logging.getLogger("minisgl_frontend_openai.app")


async def chat_completions(request: Request) -> Response:
    ctx = context_of(request)
    client = ctx.client
    req = parse(ChatCompletionRequest, await request.body())
    model = ctx.check_model(req.model)
    sampling, grammar_param = with_structured(req.model_extra, req.sampling())
    tools, sampling = prepare_tools(req.model_extra, sampling)
    if tools is not None and tools.mode in ("required", "named"):
        grammar_param = "tools"
    messages = req.chat_messages()
    rid = uuid.uuid4().hex
    now = time.time()
    engine_requests = [
        GenerateRequest(request_id=f"chatcmpl-{rid}-{j}", owner=client.frontend_id,
                        sampling=for_choice(sampling, j), messages=messages, arrival_time=now,
                        tools=tools.template_json if tools else None,
                        chat_template_kwargs=req.template_kwargs_json())
        for j in range(req.choices_per_prompt)]
    fmt = chat_format(tools, prompt_logprobs=req.prompt_logprobs,
                      response_id=f"chatcmpl-{rid}", model=model, created=int(now),
                      include_usage=req.include_usage,
                      return_token_ids=bool(req.return_token_ids),
                      logprobs=sampling.logprobs is not None)
    return await answer(ctx, request, engine_requests, fmt, req.choices_per_prompt,
                        bool(req.stream), grammar_param)


async def completions(request: Request) -> Response:
    ctx = context_of(request)
    client = ctx.client
    req = parse(CompletionRequest, await request.body())
    model = ctx.check_model(req.model)
    sampling, grammar_param = with_structured(req.model_extra, req.sampling())
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
    return await answer(ctx, request, engine_requests, fmt, n, bool(req.stream), grammar_param)


async def answer(ctx: AppContext, request: Request, engine_requests: Sequence[GenerateRequest],
                 fmt: CompletionFormat, group_size: int, stream: bool,
                 grammar_param: str | None = None) -> Response:
    """Run ``engine_requests`` (``group_size`` choices per prompt) and answer in ``fmt``;
    ``grammar_param`` names the field whose grammar the engine may reject."""
    async def full(gen: Generation) -> Response:
        await gen.collect()
        return JSONResponse(fmt.full(gen.choices, gen.usage()))

    return await run_generation(
        ctx, request, engine_requests, collect=full, group_size=group_size,
        grammar_param=grammar_param,
        stream=(lambda gen: _stream_body(gen, fmt, len(engine_requests))) if stream else None)


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


def add_generate_routes(app: FastAPI) -> None:
    """Register the routes (they find their AppContext in ``app.state.ctx``)."""
    app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    app.add_api_route("/v1/completions", completions, methods=["POST"])
