"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the chat path.

A body is translated into the chat completion request it means (``anthropic_request``) and runs
as one: the same engine request, tool grammar, reasoning split, abort on disconnect and metrics.
Only the answer's shape (``anthropic_format``) and the error envelope (``anthropic_errors``)
are Anthropic's.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from minisgl_core.api import (
    EngineUnavailable,
    GenerateRequest,
    RequestRejected,
    SamplingParams,
)
from minisgl_frontend_openai.answering import run_generation
from minisgl_frontend_openai.anthropic_errors import anthropic_envelope, anthropic_status
from minisgl_frontend_openai.anthropic_format import MessageFormat, StreamEvent
from minisgl_frontend_openai.anthropic_request import CountTokensRequest, MessagesRequest
from minisgl_frontend_openai.body import parse
from minisgl_frontend_openai.context import (
    CLIENT_CLOSED_REQUEST,
    AppContext,
    context_of,
    unavailable,
)
from minisgl_frontend_openai.errors import APIError, from_error_info, rejected
from minisgl_frontend_openai.generation import Generation
from minisgl_frontend_openai.schemas import ChatCompletionRequest
from minisgl_frontend_openai.structured import with_structured
from minisgl_frontend_openai.thinking_budget import ThinkingBudget
from minisgl_frontend_openai.tools import prepare_tools, tool_request

log = logging.getLogger("minisgl_frontend_openai.app")


def event_frame(name: str, data: dict[str, Any]) -> bytes:
    """One SSE event with its ``event:`` line, as Anthropic streams them."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {payload}\n\n".encode()


def _error_response(error: APIError) -> Response:
    return JSONResponse(anthropic_envelope(error), status_code=anthropic_status(error))


def _anthropic_errors(handler: Callable[[Request], Awaitable[Response]]
                      ) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with every failure answered in Anthropic's envelope."""
    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except APIError as exc:
            return _error_response(exc)
        except RequestRejected as exc:
            return _error_response(rejected(exc))
        except EngineUnavailable:
            return _error_response(unavailable())
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody is there to read it
        except Exception as exc:  # noqa: BLE001 - any crash is still an Anthropic-shaped 500
            log.exception("unhandled error in /v1/messages")
            return _error_response(APIError(500, f"internal error: {type(exc).__name__}",
                                            type="server_error"))
    return answer


async def create_message(request: Request) -> Response:
    ctx = context_of(request)
    req = parse(MessagesRequest, await request.body())
    model = ctx.check_model(req.model)
    chat = req.chat_request()
    sampling, grammar_param = with_structured(chat.model_extra, chat.sampling())
    tools, sampling = prepare_tools(chat.model_extra, sampling)
    if tools is not None and tools.mode in ("required", "named"):
        grammar_param = "tools"
    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    engine_request = GenerateRequest(
        request_id=message_id, owner=ctx.client.frontend_id, sampling=sampling,
        messages=chat.chat_messages(), arrival_time=time.time(),
        tools=tools.template_json if tools else None,
        chat_template_kwargs=chat.template_kwargs_json())
    fmt = MessageFormat(message_id=message_id, model=model, tools=tools,
                        show_thinking=req.thinking is None or req.thinking.type != "disabled")
    budget = req.thinking.budget_tokens if req.thinking is not None and \
        req.thinking.type == "enabled" else None
    client = None if budget is None or ctx.reasoning_end is None else ThinkingBudget(
        ctx.client, budget, ctx.reasoning_end)
    return await _answer(ctx, request, engine_request, fmt, bool(req.stream), grammar_param,
                         client)


async def _answer(ctx: AppContext, request: Request, engine_request: GenerateRequest,
                  fmt: MessageFormat, stream: bool, grammar_param: str | None,
                  client: ThinkingBudget | None) -> Response:
    async def full(gen: Generation) -> Response:
        await gen.collect()
        choice = gen.choices[0]
        return JSONResponse(fmt.full(
            "".join(choice.reasoning), "".join(choice.text), choice.finish_reason or "stop",
            choice.stop_string, _usage(choice.prompt_tokens, choice.completion_tokens,
                                       choice.cached_tokens), choice.tool_parser))

    return await run_generation(
        ctx, request, [engine_request], collect=full, grammar_param=grammar_param,
        stream=(lambda gen: _stream_body(gen, fmt)) if stream else None, client=client)


def _usage(prompt_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, int]:
    return {"input_tokens": prompt_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached_tokens, "cache_creation_input_tokens": 0}


async def _stream_body(gen: Generation, fmt: MessageFormat) -> AsyncIterator[bytes]:
    events: list[StreamEvent] = []
    try:
        async for _, delta in gen.events():
            events = fmt.feed(delta)
            if delta.finish_reason is not None:
                events += fmt.finish(delta.finish_reason, delta.stop_string,
                                     delta.prompt_tokens, delta.completion_tokens,
                                     delta.cached_tokens)
            for name, data in events:
                yield event_frame(name, data)
    except APIError as err:
        # the status line is gone: the failure is an ``error`` event, never a normal stop
        yield event_frame("error", anthropic_envelope(err))
    except Exception as exc:  # noqa: BLE001
        log.exception("stream failed")
        yield event_frame("error", anthropic_envelope(APIError(
            500, f"internal error: {type(exc).__name__}", type="server_error")))


async def count_tokens(request: Request) -> Response:
    ctx = context_of(request)
    req = parse(CountTokensRequest, await request.body())
    ctx.check_model(req.model)
    chat = parse(ChatCompletionRequest, json.dumps(req.chat_body()).encode())
    tools = tool_request(chat.model_extra or {})
    reply = await ctx.client.tokenize(GenerateRequest(
        request_id="count_tokens", owner=ctx.client.frontend_id, sampling=SamplingParams(),
        messages=chat.chat_messages(), tools=tools.template_json if tools else None,
        chat_template_kwargs=chat.template_kwargs_json()))
    if reply.error is not None:
        raise from_error_info(reply.error)
    return JSONResponse({"input_tokens": len(reply.token_ids)})


def add_anthropic_routes(app: FastAPI) -> None:
    """Register the routes (they find their AppContext in ``app.state.ctx``)."""
    app.add_api_route("/v1/messages", _anthropic_errors(create_message), methods=["POST"])
    app.add_api_route("/v1/messages/count_tokens", _anthropic_errors(count_tokens),
                      methods=["POST"])
