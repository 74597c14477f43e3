"""Pure-ASGI middleware (never BaseHTTPMiddleware, which hides client disconnects): the bearer
API key check and the request body size limit."""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from minisgl_frontend_openai.errors import APIError


async def send_error(send: Send, error: APIError, *,
                     extra_headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Send ``error`` as a complete JSON response with the OpenAI envelope."""
    body = json.dumps(error.envelope()).encode()
    await send({"type": "http.response.start", "status": error.status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *extra_headers]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ApiKeyMiddleware:
    """401 unless ``Authorization: Bearer <key>`` matches; ``open_paths`` need no key."""

    def __init__(self, app: ASGIApp, *, api_key: str, open_paths: Iterable[str]) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        # compare_digest: the time taken does not reveal how much of the key was right
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        message = ("missing API key: send 'Authorization: Bearer <key>'" if not given
                   else "incorrect API key")
        await send_error(send, APIError(401, message, code="invalid_api_key"),
                         extra_headers=[(b"www-authenticate", b"Bearer")])


class BodyTooLarge(Exception):
    """Raised from ``receive`` when a request body grows past the limit."""


class BodyLimitMiddleware:
    """413 for bodies over ``max_body_bytes``: by Content-Length up front, else while reading."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    def _error(self) -> APIError:
        return APIError(413, f"the request body exceeds {self.limit} bytes",
                        code="request_too_large")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await send_error(send, self._error(), extra_headers=[(b"connection", b"close")])
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await send_error(send, self._error(), extra_headers=[(b"connection", b"close")])
