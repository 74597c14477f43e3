"""The ``messages`` of a chat request body, and their mapping to minisgl ChatMessages."""

from __future__ import annotations

import json
from typing import Any

from minisgl_core.api import ChatMessage, ToolCall
from minisgl_frontend_openai.body import Strict
from minisgl_frontend_openai.errors import bad_request

_CHAT_ROLES = {"system": "system", "developer": "system", "user": "user",
               "assistant": "assistant", "tool": "tool"}


class ContentPart(Strict):
    """One part of a message's content array; only text parts are supported."""

    type: str
    text: str | None = None


class CalledFunction(Strict):
    """``function`` of a tool call in the history."""

    name: str
    arguments: str | dict[str, Any] = "{}"


class HistoryToolCall(Strict):
    """A tool call an earlier assistant turn made."""

    id: str = ""
    type: str = "function"
    function: CalledFunction


class Message(Strict):
    """One chat message (extra fields such as ``name`` are accepted and ignored)."""

    role: str
    content: str | list[ContentPart] | None = None
    tool_calls: list[HistoryToolCall] | None = None  # assistant turns
    tool_call_id: str | None = None  # tool turns: the call they answer


def chat_messages(messages: list[Message]) -> tuple[ChatMessage, ...]:
    """A request's ``messages`` as minisgl ChatMessages (content parts joined by newlines)."""
    if not messages:
        raise bad_request("'messages' must not be empty", param="messages")
    out = []
    for i, msg in enumerate(messages):
        role = _CHAT_ROLES.get(msg.role)
        if role is None:
            raise bad_request(f"messages[{i}].role '{msg.role[:40]}' is not supported "
                              f"(use system, developer, user, assistant or tool)",
                              param=f"messages.{i}.role")
        calls = tuple(ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments
                               if isinstance(c.function.arguments, str)
                               else json.dumps(c.function.arguments, ensure_ascii=False))
                      for c in msg.tool_calls or ())
        if calls and role != "assistant":
            raise bad_request(f"messages[{i}]: only assistant messages carry tool_calls",
                              param=f"messages.{i}.tool_calls")
        out.append(ChatMessage(role=role, content=_content_text(msg.content, i),
                               tool_calls=calls, tool_call_id=msg.tool_call_id))
    return tuple(out)


def _content_text(content: str | list[ContentPart] | None, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise bad_request(f"messages[{i}]: content part type '{part.type[:40]}' is not "
                              f"supported (only 'text')", param=f"messages.{i}.content",
                              code="unsupported_parameter")
        texts.append(part.text)
    return "\n".join(texts)
