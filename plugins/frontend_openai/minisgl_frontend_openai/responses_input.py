"""The body of ``POST /v1/responses``, its input items, and their translation onto what a chat
request builds: the same ChatMessages, tools, grammar and SamplingParams."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from pydantic import Field

from minisgl_core.api import (
    ChatMessage,
    RequestRejected,
    SamplingParams,
    StructuredOutput,
    ToolRequest,
)
from minisgl_frontend_openai.body import Strict
from minisgl_frontend_openai.errors import bad_request
from minisgl_frontend_openai.messages import CalledFunction, HistoryToolCall, Message, chat_messages
from minisgl_frontend_openai.tools import prepare_tools

_FUNCTION_FIELD = re.compile(r"(tools\.\d+\.)function\.")
Count = Annotated[int, Field(ge=1, le=2**31 - 1)]
Item = dict[str, Any]
TEXT_PARTS = ("input_text", "output_text")
ROLES = ("user", "system", "developer", "assistant")


class ResponsesRequest(Strict):
    """POST /v1/responses. Unknown fields are ignored, except those refused in ``check``."""

    model: str | None = None
    input: str | list[Item] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    max_output_tokens: Count | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[Item] | None = None
    tool_choice: str | Item | None = None
    parallel_tool_calls: bool | None = None
    text: Item | None = None
    reasoning: Item | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    store: bool | None = None
    stream: bool | None = None
    background: bool | None = None
    truncation: str | None = None
    include: list[str] | None = None  # accepted and ignored: nothing optional is left out

    def check(self) -> None:
        if self.background:
            raise bad_request("'background' mode is not supported by this server: answer in the "
                              "request, streamed or not", param="background",
                              code="unsupported_parameter")
        for name in ("conversation", "prompt", "max_tool_calls"):
            if (self.model_extra or {}).get(name) is not None:
                raise bad_request(f"'{name}' is not supported by this server", param=name,
                                  code="unsupported_parameter")
        if (self.model_extra or {}).get("top_logprobs"):
            raise bad_request("'top_logprobs' is not supported on /v1/responses",
                              param="top_logprobs", code="unsupported_parameter")
        if self.truncation not in (None, "disabled"):
            raise bad_request("only 'truncation': 'disabled' is supported: a prompt longer than "
                              "the context is refused", param="truncation",
                              code="unsupported_parameter")
        if self.metadata is not None and len(self.metadata) > 16:
            raise bad_request("'metadata' takes at most 16 keys", param="metadata")


def new_id(prefix: str) -> str:
    """An item or response id in OpenAI's spelling, e.g. ``msg_<hex>``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def input_items(req: ResponsesRequest) -> list[Item]:
    """The request's input as normalized items (each with an id and a type), as stored and as
    ``GET /v1/responses/{id}/input_items`` lists them; 400 for an item this server cannot
    read."""
    if req.input is None or req.input == "" or req.input == []:
        raise bad_request("'input' is required and must not be empty", param="input")
    if isinstance(req.input, str):
        return [_message("user", [{"type": "input_text", "text": req.input}])]
    return [_item(item, i) for i, item in enumerate(req.input)]


def _message(role: str, content: list[Item], item_id: str | None = None) -> Item:
    return {"id": item_id or new_id("msg"), "type": "message", "role": role,
            "content": content, "status": "completed"}


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise bad_request(f"'{where}' must be a string", param=where)
    return value


def _id(item: Item, prefix: str) -> str:
    """The item's own id (a client may send items back with theirs), else a new one."""
    given = item.get("id")
    return given if isinstance(given, str) and given else new_id(prefix)


def _item(item: Any, i: int) -> Item:
    where = f"input.{i}"
    if not isinstance(item, dict):
        raise bad_request(f"'{where}' must be an object", param=where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise bad_request(f"'{where}.role' must be one of {', '.join(ROLES)}",
                              param=f"{where}.role")
        return _message(role, _content(item.get("content"), f"{where}.content", role),
                        _id(item, "msg"))
    if kind == "function_call":
        return {"id": _id(item, "fc"), "type": "function_call",
                "call_id": _text(item.get("call_id"), f"{where}.call_id"),
                "name": _text(item.get("name"), f"{where}.name"),
                "arguments": _text(item.get("arguments", "{}"), f"{where}.arguments"),
                "status": "completed"}
    if kind == "function_call_output":
        output = item.get("output")
        if isinstance(output, list):
            output = "\n".join(p["text"] for p in _content(output, f"{where}.output", "tool"))
        return {"id": _id(item, "fco"), "type": "function_call_output",
                "call_id": _text(item.get("call_id"), f"{where}.call_id"),
                "output": _text(output, f"{where}.output"), "status": "completed"}
    if kind == "reasoning":  # an earlier turn's thinking: kept in the chain, not in the prompt
        return {**item, "id": _id(item, "rs")}
    shown = str(kind)[:40]
    raise bad_request(f"input item type '{shown}' is not supported (use message, function_call, "
                      "function_call_output or reasoning)", param=f"{where}.type",
                      code="unsupported_parameter")


def _content(content: Any, where: str, role: str) -> list[Item]:
    kind = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        return [{"type": kind, "text": content}]
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or a list of content parts", param=where)
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
            shown = str(part.get("type") if isinstance(part, dict) else part)[:40]
            raise bad_request(f"content part type '{shown}' is not supported (only input_text "
                              "and output_text)", param=f"{where}.{j}",
                              code="unsupported_parameter")
        parts.append({"type": part["type"], "text": _text(part.get("text"), f"{where}.{j}.text"),
                      **({"annotations": []} if part["type"] == "output_text" else {})})
    return parts


def chat_history(instructions: str | None, items: Sequence[Item]) -> tuple[ChatMessage, ...]:
    """The items of a chain as chat messages: ``instructions`` first (as the system prompt),
    consecutive function calls as one assistant turn, reasoning left out (chat templates drop
    earlier turns' thinking too); checked as a chat request's ``messages`` are."""
    messages: list[Message] = [Message(role="system", content=instructions)] if instructions \
        else []
    for item in items:
        kind = item["type"]
        if kind == "message":
            text = "\n".join(p["text"] for p in item["content"])
            messages.append(Message(role=item["role"], content=text))
        elif kind == "function_call":
            call = HistoryToolCall(id=item["call_id"], function=CalledFunction(
                name=item["name"], arguments=item["arguments"]))
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls = [*(last.tool_calls or []), call]
            else:
                messages.append(Message(role="assistant", content="", tool_calls=[call]))
        elif kind == "function_call_output":
            messages.append(Message(role="tool", content=item["output"],
                                    tool_call_id=item["call_id"]))
    if not messages:
        raise bad_request("'input' needs a message, a function call or a function call output",
                          param="input")
    return chat_messages(messages)


def chat_tools(req: ResponsesRequest) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` in chat's shapes; 400 for a
    built-in tool (web search, file search, ...), which this server does not run."""
    extra: dict[str, Any] = {"parallel_tool_calls": req.parallel_tool_calls}
    if req.tools:
        tools = []
        for i, tool in enumerate(req.tools):
            kind = tool.get("type")
            if kind != "function":
                raise bad_request(f"tools[{i}]: the built-in tool '{str(kind)[:40]}' is not "
                                  "supported (only function tools)", param=f"tools.{i}.type",
                                  code="unsupported_parameter")
            fn = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
            tools.append({"type": "function", "function": fn})
        extra["tools"] = tools
    choice = req.tool_choice
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise bad_request("'tool_choice' must be none, auto, required or {\"type\": "
                              "\"function\", \"name\": ...}", param="tool_choice",
                              code=None if choice.get("type") == "function"
                              else "unsupported_parameter")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    extra["tool_choice"] = choice
    return extra


def text_format(req: ResponsesRequest) -> StructuredOutput | None:
    """``text.format``: plain text, json_object or json_schema (the grammar chat's
    ``response_format`` builds)."""
    fmt = (req.text or {}).get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput("json")
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise bad_request("'text.format.schema' must be a JSON schema object",
                              param="text.format.schema")
        return StructuredOutput("json_schema", json.dumps(schema))
    raise bad_request("'text.format.type' must be text, json_object or json_schema",
                      param="text.format.type", code="unsupported_parameter")


@dataclass(frozen=True)
class EnginePlan:
    """What one Responses request becomes: chat's internal request, field for field."""

    messages: tuple[ChatMessage, ...]
    sampling: SamplingParams
    tools: ToolRequest | None
    grammar_param: str | None  # the field an engine's grammar rejection is named after
    template_kwargs: str | None


def engine_plan(req: ResponsesRequest, history: Sequence[Item]) -> EnginePlan:
    """Map the request (``history``: the chain's items and this input) onto chat's request."""
    try:
        sampling = SamplingParams(max_tokens=req.max_output_tokens,
                                  **{k: v for k, v in (("temperature", req.temperature),
                                                       ("top_p", req.top_p)) if v is not None})
    except ValueError as exc:
        field = str(exc).split(" ", 1)[0]
        raise bad_request(str(exc), param="max_output_tokens" if field == "max_tokens"
                          else field) from None
    structured = text_format(req)
    grammar_param = None
    if structured is not None:
        sampling = msgspec.structs.replace(sampling, structured=structured)
        grammar_param = "text.format"
    forced = req.tool_choice == "required" or isinstance(req.tool_choice, dict)
    if structured is not None and forced and req.tools:
        raise bad_request("tool_choice 'required' or a named function cannot be combined with "
                          "a json_object or json_schema 'text.format'", param="tool_choice")
    try:
        tools, sampling = prepare_tools(chat_tools(req), sampling)
    except RequestRejected as exc:  # named in chat's shape: tools.N.function.name -> tools.N.name
        exc.message = _FUNCTION_FIELD.sub(r"\1", exc.message)
        if exc.param is not None:
            exc.param = _FUNCTION_FIELD.sub(r"\1", exc.param)
        raise
    if tools is not None and tools.mode in ("required", "named"):
        grammar_param = "tool_choice"
    effort = (req.reasoning or {}).get("effort")
    # a thinking model's template switch (Qwen3's); other templates ignore it
    kwargs = json.dumps({"enable_thinking": False}) if effort in ("none", "minimal") else None
    return EnginePlan(chat_history(req.instructions, history), sampling, tools, grammar_param,
                      kwargs)
