"""Turn protobuf requests into core GenerateRequests, and core errors into gRPC status codes.

A bad request raises ``RequestRejected``, as every check in the core does; the server maps each
one through ``status_for_error`` (INVALID_ARGUMENT, NOT_FOUND for the model). Tools are handed
to the core in OpenAI's shapes (``minisgl_core.api.tool_request`` checks them), so the prompt
and the grammar are the OpenAI frontend's for the same tools.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, get_args

import grpc

from minisgl_core.api import (
    ChatMessage,
    ErrorInfo,
    GenerateRequest,
    RequestRejected,
    SamplingParams,
    StructuredKind,
    StructuredOutput,
    ToolCall,
    ToolRequest,
    tool_request,
)

# proto field -> SamplingParams field, for the `optional` scalars (unset = the core's default)
_OPTIONAL_SCALARS = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "logprobs", "prompt_logprobs")
DEFAULT_MAX_TOKENS = SamplingParams().max_tokens
STRUCTURED_KINDS: tuple[str, ...] = get_args(StructuredKind)
TOOL_CHOICE_MODES = ("none", "auto", "required")


def to_sampling(sampling: Any) -> SamplingParams:
    """Build SamplingParams from a ``minisgl.v1.SamplingParams``; RequestRejected when invalid."""
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
            raise RequestRejected(f"sampling.structured.kind must be one of "
                                  f"{', '.join(STRUCTURED_KINDS)}, got {kind[:40]!r}",
                                  param="sampling.structured.kind")
        # whether the spec compiles is checked by the engine: INVALID_ARGUMENT naming the problem
        kwargs["structured"] = StructuredOutput(kind, sampling.structured.spec)
    try:
        return SamplingParams(**kwargs)
    except ValueError as exc:  # the core says which field and why
        raise RequestRejected(f"sampling: {exc}", param="sampling") from exc


def to_core_request(request: Any, *, model_name: str, owner: str
                    ) -> tuple[GenerateRequest, ToolRequest | None]:
    """Validate a ``minisgl.v1.GenerateRequest``: the engine's GenerateRequest, and its checked
    tools (None without any)."""
    if request.model and request.model != model_name:
        raise RequestRejected(f"model {request.model!r} is not served here; this server serves "
                              f"{model_name!r}", code="model_not_found", param="model")
    given = [name for name, present in (("prompt", bool(request.prompt)),
                                        ("messages", len(request.messages) > 0),
                                        ("token_ids", len(request.token_ids) > 0)) if present]
    if len(given) != 1:
        got = " and ".join(given) if given else "none"
        raise RequestRejected("exactly one of prompt, messages or token_ids must be set; "
                              f"got {got}", param="prompt")
    messages = None
    if request.messages:
        for i, m in enumerate(request.messages):
            if not m.role:
                raise RequestRejected(f"messages[{i}].role must not be empty",
                                      param=f"messages[{i}].role")
        messages = tuple(ChatMessage(role=m.role, content=m.content,
                                     tool_calls=_history_calls(i, m),
                                     tool_call_id=m.tool_call_id or None)
                         for i, m in enumerate(request.messages))
    token_ids = None
    if request.token_ids:
        token_ids = tuple(request.token_ids)
        if min(token_ids) < 0:
            raise RequestRejected("token_ids must be non-negative", param="token_ids")
    sampling = to_sampling(request.sampling)
    tools = to_tool_request(request)
    if tools is not None:
        sampling = tools.constrain(sampling)
    return GenerateRequest(
        request_id=request.request_id or uuid.uuid4().hex,
        owner=owner,
        sampling=sampling,
        prompt=request.prompt or None,
        messages=messages,
        token_ids=token_ids,
        tools=tools.template_json if tools is not None else None,
        chat_template_kwargs=_template_kwargs(request),
    ), tools


def _template_kwargs(request: Any) -> str | None:
    """``chat_template_kwargs`` (a JSON object, chats only), checked; None when empty."""
    raw = request.chat_template_kwargs
    if not raw:
        return None
    try:
        kwargs = json.loads(raw)
    except ValueError:
        kwargs = None
    if not isinstance(kwargs, dict):
        raise RequestRejected("chat_template_kwargs must be a JSON object",
                              param="chat_template_kwargs")
    if not request.messages:
        raise RequestRejected("chat_template_kwargs needs messages (a chat)",
                              param="chat_template_kwargs")
    return raw


def to_tool_request(request: Any) -> ToolRequest | None:
    """The checked tools of a ``minisgl.v1.GenerateRequest`` (None without any)."""
    tools = [_tool(i, t) for i, t in enumerate(request.tools)]
    choice: str | dict[str, Any] | None = None
    which = request.tool_choice.WhichOneof("choice") if request.HasField("tool_choice") else None
    if which == "mode":
        choice = request.tool_choice.mode
        if choice not in TOOL_CHOICE_MODES:
            raise RequestRejected(f"tool_choice.mode must be one of "
                                  f"{', '.join(TOOL_CHOICE_MODES)}, got {choice[:40]!r}",
                                  param="tool_choice.mode")
    elif which == "function":
        choice = {"type": "function", "function": {"name": request.tool_choice.function}}
    if tools and not request.messages:
        raise RequestRejected("tools need messages (a chat), not a prompt or token_ids",
                              param="tools")
    parallel = request.parallel_tool_calls if request.HasField("parallel_tool_calls") else None
    return tool_request(tools, choice, parallel)


def _tool(i: int, tool: Any) -> dict[str, Any]:
    """A proto Tool as the OpenAI tool the chat template sees (empty fields left out)."""
    function: dict[str, Any] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    if tool.parameters:
        try:
            function["parameters"] = json.loads(tool.parameters)
        except ValueError:
            raise RequestRejected(f"tools[{i}].parameters is not valid JSON",
                                  param=f"tools[{i}].parameters") from None
    return {"type": "function", "function": function}


def _history_calls(i: int, message: Any) -> tuple[ToolCall, ...]:
    if message.tool_calls and message.role != "assistant":
        raise RequestRejected(f"messages[{i}]: only assistant messages carry tool_calls",
                              param=f"messages[{i}].tool_calls")
    # empty arguments: OpenAI's default for a call that has none
    return tuple(ToolCall(c.id, c.name, c.arguments or "{}") for c in message.tool_calls)


def status_for_error(error: ErrorInfo) -> grpc.StatusCode:
    """The gRPC status code of an error: a rejection (``RequestRejected.info()``, here or in
    the engine) or a failure the engine put on a terminal delta."""
    if error.type == "invalid_request_error":
        if error.code == "model_not_found":
            return grpc.StatusCode.NOT_FOUND
        return grpc.StatusCode.INVALID_ARGUMENT  # context_length_exceeded, bad token ids ...
    if error.type == "overloaded_error":
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if error.code in ("engine_unavailable", "shutting_down"):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL
