"""The OpenAI error envelope and the mapping from engine failures to HTTP statuses."""

from __future__ import annotations

from typing import Any

from minisgl_core.wire.schema import ErrorInfo

MAX_MESSAGE_CHARS = 500  # error messages never carry whole inputs back to the client

# ErrorInfo codes that mean "the engine is gone", not "this request is bad"
UNAVAILABLE_CODES = frozenset({"engine_unavailable", "unavailable", "engine_dead"})


class APIError(Exception):
    """An error answered with an HTTP status and the OpenAI envelope."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = _clip(message)
        self.type = type
        self.param = param
        self.code = code

    def envelope(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 invalid_request_error."""
    return APIError(400, message, param=param, code=code)


def from_error_info(info: ErrorInfo | None) -> APIError:
    """Turn an engine-reported error into the status a client should see."""
    if info is None:
        return APIError(500, "the engine reported an error without details",
                        type="server_error", code="internal_error")
    if info.type == "invalid_request_error":
        status = 400
    elif info.type == "overloaded_error":
        status = 429
    elif info.code in UNAVAILABLE_CODES:
        status = 503
    else:
        status = 500
    return APIError(status, info.message, type=info.type, param=info.param, code=info.code)


def engine_aborted() -> APIError:
    """The engine ended a request with ``abort`` although the client is still there."""
    return APIError(503, "the request was aborted by the engine", type="server_error",
                    code="request_aborted")


def _clip(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 3] + "..."
