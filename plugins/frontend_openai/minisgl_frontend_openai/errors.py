"""The OpenAI error envelope, and the one mapping from a rejection or an engine failure to an
HTTP status: every check raises ``RequestRejected`` (``bad_request`` here), the app's handler and
the generation path both answer it through ``from_error_info``."""

from __future__ import annotations

from typing import Any

from minisgl_core.api import ErrorInfo, RequestRejected

MAX_MESSAGE_CHARS = 500  # error messages never carry whole inputs back to the client

# ErrorInfo codes that mean "the engine is gone", not "this request is bad"
UNAVAILABLE_CODES = frozenset({"engine_unavailable", "unavailable", "engine_dead"})
# rejections of something the request names that is not here: a 404, not a 400
NOT_FOUND_CODES = frozenset({"model_not_found"})


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


def bad_request(message: str, *, param: str | None = None, code: str | None = None
                ) -> RequestRejected:
    """A rejection found by this frontend's own checks (the shape of a body): a 400."""
    return RequestRejected(message, code=code, param=param)


def rejected(exc: RequestRejected) -> APIError:
    """Any check's rejection, this frontend's or the core's, as the client gets it."""
    return from_error_info(exc.info())


def from_error_info(info: ErrorInfo | None) -> APIError:
    """Turn an error (a rejection, or an engine failure) into the status a client should see."""
    if info is None:
        return APIError(500, "the engine reported an error without details",
                        type="server_error", code="internal_error")
    if info.type == "invalid_request_error":
        status = 404 if info.code in NOT_FOUND_CODES else 400
    elif info.type == "overloaded_error":
        status = 429
    elif info.code in UNAVAILABLE_CODES:
        status = 503
    elif info.code == "not_implemented":  # e.g. a tokenizer role that answers no /tokenize
        status = 501
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
