"""Anthropic's error envelope and status codes, for the ``/v1/messages`` routes only."""

from __future__ import annotations

from typing import Any

from minisgl_frontend_openai.errors import APIError

MESSAGES_PREFIX = "/v1/messages"
OVERLOADED = 529  # Anthropic's status for a server too busy to take the request

# Anthropic's error type for each status it uses
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", OVERLOADED: "overloaded_error"}


def is_messages_path(path: str) -> bool:
    """True for the routes that answer errors in Anthropic's envelope."""
    return path == MESSAGES_PREFIX or path.startswith(MESSAGES_PREFIX + "/")


def anthropic_status(error: APIError) -> int:
    """The status an Anthropic client gets: an engine too busy is 529, others keep theirs."""
    return OVERLOADED if error.type == "overloaded_error" else error.status


def anthropic_envelope(error: APIError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``."""
    status = anthropic_status(error)
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": error.message}}
