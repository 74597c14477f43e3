"""One HTTP request's generation, run the same way whichever API asked (chat and completions,
responses, messages): started, its first deltas awaited before any header (so errors found while
tokenizing are still a 4xx), then streamed or collected, and aborted when the client leaves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from fastapi import Request
from fastapi.responses import Response

from minisgl_core.api import GenerateRequest
from minisgl_frontend_openai.context import CLIENT_CLOSED_REQUEST, AppContext, unavailable
from minisgl_frontend_openai.errors import APIError
from minisgl_frontend_openai.generation import Generates, Generation
from minisgl_frontend_openai.sse import ClientDisconnected, SSEResponse, race_disconnect
from minisgl_frontend_openai.structured import name_grammar_error

T = TypeVar("T")


async def run_generation(ctx: AppContext, request: Request,
                         engine_requests: Sequence[GenerateRequest], *,
                         collect: Callable[[Generation], Awaitable[T]],
                         stream: Callable[[Generation], AsyncIterator[bytes]] | None = None,
                         group_size: int = 1, grammar_param: str | None = None,
                         input_param: str | None = None,
                         client: Generates | None = None) -> Response | T:
    """``stream``: the SSE response of ``stream(gen)``; else what ``collect(gen)`` returns, or a
    499 response when the client left first. ``grammar_param`` names the field whose grammar
    the engine may reject; ``input_param`` the field a prompt error is about (chat's
    ``messages`` / ``prompt`` when None); ``client`` generates instead of the app's (a wrapper
    of it, such as a thinking budget)."""
    if not ctx.client.healthy():
        raise unavailable()
    gen = Generation(client or ctx.client, engine_requests, ctx.metrics, group_size=group_size)
    gen.start()
    ctx.live.add(gen)

    async def close() -> None:
        ctx.live.discard(gen)
        await gen.aclose()

    try:
        try:
            await race_disconnect(request.receive, gen.prelude())
        except APIError as exc:
            if input_param is not None and exc.param in ("messages", "prompt"):
                exc.param = input_param
            raise name_grammar_error(exc, grammar_param) from None
        if stream is not None:
            return SSEResponse(stream(gen), on_close=close)
        result = await race_disconnect(request.receive, collect(gen))
    except ClientDisconnected:
        await close()
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    except BaseException:
        await close()
        raise
    await close()
    return result
