"""Saying no: ``RequestRejected``, what every check of a request raises, and ``ErrorInfo``, how a
failure travels between processes to the frontend that answers it.

Each check runs once, where the fact it needs is known: a frontend checks the shape of a body,
the tokenizer role the prompt and its length in tokens, the scheduler its own capacity
(``engine.admission``). Each frontend maps a rejection once (OpenAI: a 400 envelope, gRPC:
INVALID_ARGUMENT); docs/errors.md lists every one a client can get. Shared by the wire schema,
the text roles and the engine, so it imports nothing but msgspec.
"""

from __future__ import annotations

from typing import Literal

import msgspec

ErrorType = Literal["invalid_request_error", "server_error", "overloaded_error"]


class ErrorInfo(msgspec.Struct, frozen=True):
    """Why a request failed; mirrors the OpenAI error envelope's fields."""

    message: str
    type: ErrorType = "invalid_request_error"
    code: str | None = None
    param: str | None = None


class RequestRejected(ValueError):
    """A request that cannot be served as sent: the client's to fix, nothing of it is kept.

    ``message`` is for people; ``code`` (stable, e.g. ``context_length_exceeded``) and ``param``
    (the request field at fault) are for programs, and either may be None.
    """

    def __init__(self, message: str, *, code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param

    def __str__(self) -> str:
        return self.message

    def info(self) -> ErrorInfo:
        """The rejection as it travels to the frontend (an ``invalid_request_error``)."""
        return ErrorInfo(message=self.message, type="invalid_request_error", code=self.code,
                         param=self.param)

    @classmethod
    def from_info(cls, info: ErrorInfo) -> RequestRejected:
        """The rejection an ``invalid_request_error`` ErrorInfo stands for."""
        return cls(info.message, code=info.code, param=info.param)
