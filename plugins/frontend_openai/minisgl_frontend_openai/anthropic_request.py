"""Anthropic's Messages API request body, translated into the chat completion request it means.

The translation is the only Anthropic-specific step before generation: a ``/v1/messages`` body
becomes a ``ChatCompletionRequest`` (system prompt, text / ``tool_use`` / ``tool_result`` blocks,
tools with ``input_schema``, ``tool_choice``, ``thinking``), so the chat route's message mapping,
tool grammar, sampling checks and engine request are the ones every API shares.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field

from minisgl_frontend_openai.body import Strict, parse
from minisgl_frontend_openai.errors import bad_request
from minisgl_frontend_openai.schemas import MAX_STOP, ChatCompletionRequest

# blocks the engine cannot read yet: a clear 400, never silently dropped
UNSERVED_BLOCKS = {"image": "image blocks are not supported (this server serves text models)",
                   "document": "document blocks are not supported"}
# blocks earlier assistant turns carry that the prompt does not need (the model's own thinking)
DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
# request fields of features this server does not have
UNSUPPORTED_FIELDS = ("mcp_servers", "container")


class Block(Strict):
    """One content block; which fields matter depends on ``type``."""

    type: str
    text: str | None = None
    id: str | None = None  # tool_use
    name: str | None = None  # tool_use
    input: dict[str, Any] | None = None  # tool_use
    tool_use_id: str | None = None  # tool_result
    content: str | list[Block] | None = None  # tool_result
    is_error: bool | None = None  # tool_result


class AnthropicMessage(Strict):
    """One turn of ``messages``."""

    role: str
    content: str | list[Block]


class AnthropicTool(Strict):
    """A client tool: its name, description and JSON schema of its input."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    type: str | None = None  # "custom" or absent; server tools have a dated type


class ToolChoice(Strict):
    """``tool_choice``: auto, any, tool (with ``name``) or none."""

    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(Strict):
    """``thinking``: enabled (with a token budget) or disabled."""

    type: str
    budget_tokens: int | None = None


class CountTokensRequest(Strict):
    """POST /v1/messages/count_tokens: the conversation, without generation parameters."""

    model: str | None = None
    messages: list[AnthropicMessage]
    system: str | list[Block] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None

    def check(self) -> None:
        for name in UNSUPPORTED_FIELDS:
            if (self.model_extra or {}).get(name):
                raise bad_request(f"'{name}' is not supported by this server", param=name)

    def chat_body(self) -> dict[str, Any]:
        """The OpenAI chat completion body this request means."""
        body: dict[str, Any] = {"model": self.model,
                                "messages": _system(self.system) + _turns(self.messages)}
        if self.tools:
            body["tools"] = [_tool(t, i) for i, t in enumerate(self.tools)]
            body.update(_tool_choice(self.tool_choice))
        elif self.tool_choice is not None and self.tool_choice.type != "none":
            raise bad_request("'tool_choice' needs 'tools'", param="tool_choice")
        if self.thinking is not None:
            if self.thinking.type not in ("enabled", "disabled", "adaptive"):
                raise bad_request(f"thinking.type '{self.thinking.type[:40]}' is not one of "
                                  f"enabled, disabled, adaptive", param="thinking.type")
            body["chat_template_kwargs"] = {"enable_thinking": self.thinking.type != "disabled"}
        return body


class MessagesRequest(CountTokensRequest):
    """POST /v1/messages."""

    max_tokens: Annotated[int, Field(ge=1)]
    stop_sequences: list[str] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: float | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    metadata: dict[str, Any] | None = None  # accepted (user_id), not used
    stream: bool | None = None

    def check(self) -> None:
        super().check()
        if self.stop_sequences is not None and len(self.stop_sequences) > MAX_STOP:
            raise bad_request(f"at most {MAX_STOP} stop_sequences are allowed",
                              param="stop_sequences")

    def chat_request(self) -> ChatCompletionRequest:
        """The chat completion request this request means (validated as chat validates it)."""
        body = self.chat_body()
        body.update({"max_tokens": self.max_tokens, "stop": self.stop_sequences,
                     "temperature": self.temperature, "top_p": self.top_p,
                     "top_k": self.top_k, "stream": bool(self.stream)})
        body = {k: v for k, v in body.items() if v is not None}
        return parse(ChatCompletionRequest, json.dumps(body).encode())


def _system(system: str | list[Block] | None) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    return [{"role": "system", "content": _text_of(system, "system")}]


def _text_of(blocks: list[Block], where: str) -> str:
    texts = []
    for i, block in enumerate(blocks):
        if block.type != "text" or block.text is None:
            raise bad_request(f"{where}[{i}]: only text blocks are allowed here, got "
                              f"'{block.type[:40]}'", param=f"{where}.{i}.type")
        texts.append(block.text)
    return "\n".join(texts)


def _turns(messages: list[AnthropicMessage]) -> list[dict[str, Any]]:
    if not messages:
        raise bad_request("'messages' must not be empty", param="messages")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        if msg.role not in ("user", "assistant"):
            raise bad_request(f"messages[{i}].role must be 'user' or 'assistant'",
                              param=f"messages.{i}.role")
        if isinstance(msg.content, str):
            out.append({"role": msg.role, "content": msg.content})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        results = 0
        for j, block in enumerate(msg.content):
            where = f"messages.{i}.content.{j}"
            kind = block.type
            if kind in UNSERVED_BLOCKS:
                raise bad_request(f"messages[{i}].content[{j}]: {UNSERVED_BLOCKS[kind]}",
                                  param=where)
            if kind == "text" and block.text is not None:
                texts.append(block.text)
            elif kind == "tool_use" and msg.role == "assistant" and block.name:
                calls.append({"id": block.id or f"toolu_{i}_{j}", "type": "function",
                              "function": {"name": block.name, "arguments": json.dumps(
                                  block.input or {}, ensure_ascii=False)}})
            elif kind == "tool_result" and msg.role == "user" and block.tool_use_id:
                # a tool's answer is its own turn, right after the call it answers
                out.append({"role": "tool", "tool_call_id": block.tool_use_id,
                            "content": _result_text(block, where)})
                results += 1
            elif kind in DROPPED_BLOCKS and msg.role == "assistant":
                continue
            else:
                raise bad_request(f"messages[{i}].content[{j}]: block type '{kind[:40]}' is not "
                                  f"supported in a {msg.role} turn", param=where)
        if texts or calls or not results:  # a turn of nothing but tool results is just those
            turn: dict[str, Any] = {"role": msg.role, "content": "\n".join(texts)}
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
    return out


def _result_text(block: Block, where: str) -> str:
    content = block.content
    text = content if isinstance(content, str) or content is None else _text_of(
        content, f"{where}.content")
    return f"Error: {text}" if block.is_error else (text or "")


def _tool(tool: AnthropicTool, i: int) -> dict[str, Any]:
    if tool.type not in (None, "custom"):
        raise bad_request(f"tools[{i}]: server tool '{tool.type[:40]}' is not supported (only "
                          f"client tools with an input_schema)", param=f"tools.{i}.type")
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _tool_choice(choice: ToolChoice | None) -> dict[str, Any]:
    if choice is None:
        return {}
    out: dict[str, Any] = {}
    if choice.disable_parallel_tool_use is not None:
        out["parallel_tool_calls"] = not choice.disable_parallel_tool_use
    if choice.type == "tool":
        if not choice.name:
            raise bad_request("tool_choice of type 'tool' needs 'name'", param="tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        return out
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type)
    if mapped is None:
        raise bad_request(f"tool_choice.type '{choice.type[:40]}' is not one of auto, any, "
                          f"tool, none", param="tool_choice.type")
    out["tool_choice"] = mapped
    return out
