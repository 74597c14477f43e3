"""Turn protobuf requests into core GenerateRequests, and core errors into gRPC status codes."""

from __future__ import annotations

import uuid
from typing import Any, get_args

import grpc

from minisgl_core.wire.schema import (
    ChatMessage,
    ErrorInfo,
    GenerateRequest,
    SamplingParams,
    StructuredKind,
    StructuredOutput,
)

# proto field -> SamplingParams field, for the `optional` scalars (unset = the core's default)
_OPTIONAL_SCALARS = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "logprobs", "prompt_logprobs")
DEFAULT_MAX_TOKENS = SamplingParams().max_tokens
STRUCTURED_KINDS: tuple[str, ...] = get_args(StructuredKind)


class RequestError(Exception):
    """A request the server refuses: the gRPC status code and the message for the client."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def to_sampling(sampling: Any) -> SamplingParams:
    """Build SamplingParams from a ``minisgl.v1.SamplingParams``; RequestError when invalid."""
    kwargs: dict[str, Any] = {
        "max_tokens": sampling.max_tokens or DEFAULT_MAX_TOKENS,  # 0 (unset) = the default
        "stop": tuple(sampling.stop),
        "ignore_eos": sampling.ignore_eos,
        "min_tokens": sampling.min_tokens,
        "logit_bias": tuple(sorted(sampling.logit_bias.items())),
    }
    for name in _OPTIONAL_SCALARS:
        if sampling.HasField(name):
            kwargs[name] = getattr(sampling, name)
    if sampling.HasField("structured"):
        kind = sampling.structured.kind
        if kind not in STRUCTURED_KINDS:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"sampling.structured.kind must be one of "
                               f"{', '.join(STRUCTURED_KINDS)}, got {kind[:40]!r}")
        # whether the spec compiles is checked by the engine: INVALID_ARGUMENT naming the problem
        kwargs["structured"] = StructuredOutput(kind, sampling.structured.spec)
    try:
        return SamplingParams(**kwargs)
    except ValueError as exc:  # the core says which field and why
        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, f"sampling: {exc}") from exc


def to_core_request(request: Any, *, model_name: str, owner: str) -> GenerateRequest:
    """Validate a ``minisgl.v1.GenerateRequest`` and build the engine's GenerateRequest."""
    if request.model and request.model != model_name:
        raise RequestError(grpc.StatusCode.NOT_FOUND,
                           f"model {request.model!r} is not served here; "
                           f"this server serves {model_name!r}")
    given = [name for name, present in (("prompt", bool(request.prompt)),
                                        ("messages", len(request.messages) > 0),
                                        ("token_ids", len(request.token_ids) > 0)) if present]
    if len(given) != 1:
        got = " and ".join(given) if given else "none"
        raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"exactly one of prompt, messages or token_ids must be set; got {got}")
    messages = None
    if request.messages:
        for i, m in enumerate(request.messages):
            if not m.role:
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"messages[{i}].role must not be empty")
        messages = tuple(ChatMessage(role=m.role, content=m.content) for m in request.messages)
    token_ids = None
    if request.token_ids:
        token_ids = tuple(request.token_ids)
        if min(token_ids) < 0:
            raise RequestError(grpc.StatusCode.INVALID_ARGUMENT,
                               "token_ids must be non-negative")
    return GenerateRequest(
        request_id=request.request_id or uuid.uuid4().hex,
        owner=owner,
        sampling=to_sampling(request.sampling),
        prompt=request.prompt or None,
        messages=messages,
        token_ids=token_ids,
    )


def status_for_error(error: ErrorInfo) -> grpc.StatusCode:
    """The gRPC status code for an error the engine put on a terminal delta."""
    if error.type == "invalid_request_error":
        if error.code == "model_not_found":
            return grpc.StatusCode.NOT_FOUND
        return grpc.StatusCode.INVALID_ARGUMENT  # context_length_exceeded, bad token ids ...
    if error.type == "overloaded_error":
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if error.code in ("engine_unavailable", "shutting_down"):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL
