"""Server-sent events: ``data: {json}\\n\\n`` framing, and a response that stops its body (and so
aborts the engine requests behind it) as soon as the client disconnects.

Starlette's StreamingResponse only listens for ``http.disconnect`` for ASGI spec < 2.4 and
otherwise waits for ``send`` to fail, which uvicorn never does; this response always races the
body against the receive channel, whatever the server's spec version.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

DONE = b"data: [DONE]\n\n"
_T = TypeVar("_T")


def frame(payload: dict[str, Any]) -> bytes:
    """One SSE event carrying ``payload`` as compact JSON (never contains a raw newline)."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() \
        + b"\n\n"


class ClientDisconnected(Exception):
    """The HTTP client went away before the answer was ready."""


async def wait_disconnect(receive: Receive) -> None:
    """Return when the ASGI receive channel reports ``http.disconnect`` (body already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def race_disconnect(receive: Receive, work: Coroutine[Any, Any, _T]) -> _T:
    """Run ``work`` unless the client disconnects first (then: cancel, ClientDisconnected)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        raise ClientDisconnected
    finally:
        task.cancel()
        watcher.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)


class SSEResponse(StreamingResponse):
    """An event stream whose body is cancelled on client disconnect; ``on_close`` always runs."""

    def __init__(self, body: AsyncIterator[bytes], *,
                 on_close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(body, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body_iterator

        async def stream() -> None:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async for chunk in body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        try:
            await race_disconnect(receive, stream())
        except ClientDisconnected:
            pass
        finally:
            closer = getattr(body, "aclose", None)
            if closer is not None:
                await closer()
            await self._on_close()
