"""Pure-ASGI middleware (never BaseHTTPMiddleware, which hides client disconnects): the API key
check (a bearer token, or Anthropic's ``x-api-key``) and the request body size limit."""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from minisgl_frontend_openai.anthropic_errors import (
    anthropic_envelope,
    anthropic_status,
    is_messages_path,
)
from minisgl_frontend_openai.errors import APIError


async def send_error(send: Send, error: APIError, *,
                     extra_headers: Iterable[tuple[bytes, bytes]] = (), path: str = "") -> None:
    """Send ``error`` as a complete JSON response with the OpenAI envelope (Anthropic's on the
    ``/v1/messages`` routes)."""
    anthropic = is_messages_path(path)
    body = json.dumps(anthropic_envelope(error) if anthropic else error.envelope()).encode()
    status = anthropic_status(error) if anthropic else error.status
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *extra_headers]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ApiKeyMiddleware:
    """401 unless ``Authorization: Bearer <key>`` or ``x-api-key: <key>`` matches;
    ``open_paths`` need no key."""

    def __init__(self, app: ASGIApp, *, api_key: str, open_paths: Iterable[str]) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()
        self._expected_plain = api_key.encode()
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"")
        plain = headers.get(b"x-api-key")  # Anthropic's clients send the key this way
        # compare_digest: the time taken does not reveal how much of the key was right
        if hmac.compare_digest(given, self._expected) or (
                plain is not None and hmac.compare_digest(plain, self._expected_plain)):
            await self.app(scope, receive, send)
            return
        message = ("missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
                   if not given and plain is None else "incorrect API key")
        await send_error(send, APIError(401, message, code="invalid_api_key"),
                         extra_headers=[(b"www-authenticate", b"Bearer")], path=scope["path"])


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
            await send_error(send, self._error(), extra_headers=[(b"connection", b"close")],
                             path=scope["path"])
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
            await send_error(send, self._error(), extra_headers=[(b"connection", b"close")],
                             path=scope["path"])
