"""``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat request, as 400s when bad.

The checks and the grammar for ``required`` / a named function are the core's
(``minisgl_core.text.tool_calls``); this module reads them from the request's extra fields, turns
a ``ToolRequestError`` into the OpenAI envelope. Whether the grammar compiles is the engine's to
say (see structured.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minisgl_core.text import tool_calls
from minisgl_core.text.tool_calls import ToolRequest, ToolRequestError
from minisgl_core.wire.schema import SamplingParams
from minisgl_frontend_openai.errors import APIError, bad_request


def _bad(exc: ToolRequestError) -> APIError:
    return bad_request(exc.message, param=exc.param, code=exc.code)


def tool_request(extra: Mapping[str, Any]) -> ToolRequest | None:
    """The checked tools of a request's extra fields (None when it has none); 400 if bad."""
    try:
        return tool_calls.tool_request(extra.get("tools"), extra.get("tool_choice"),
                                       extra.get("parallel_tool_calls"))
    except ToolRequestError as exc:
        raise _bad(exc) from None


def prepare_tools(extra: Mapping[str, Any] | None, sampling: SamplingParams
                  ) -> tuple[ToolRequest | None, SamplingParams]:
    """A chat request's checked tools and its sampling, constrained as tool_choice asks."""
    tools = tool_request(extra or {})
    if tools is None:
        return None, sampling
    try:
        sampling = tools.constrain(sampling)
    except ToolRequestError as exc:
        raise _bad(exc) from None
    return tools, sampling
