"""``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat request, as 400s when bad.

The checks and the grammar for ``required`` / a named function are the core's
(``minisgl_core.api.tool_request``); this module reads them from the request's extra fields. A
bad one raises ``ToolRequestError``, a ``RequestRejected`` the app answers as every rejection.
Whether the grammar compiles is the engine's to say (see structured.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minisgl_core.api import SamplingParams, ToolRequest
from minisgl_core.api import tool_request as checked_tools


def tool_request(extra: Mapping[str, Any]) -> ToolRequest | None:
    """The checked tools of a request's extra fields (None when it has none); 400 if bad."""
    return checked_tools(extra.get("tools"), extra.get("tool_choice"),
                         extra.get("parallel_tool_calls"))


def prepare_tools(extra: Mapping[str, Any] | None, sampling: SamplingParams
                  ) -> tuple[ToolRequest | None, SamplingParams]:
    """A chat request's checked tools and its sampling, constrained as tool_choice asks."""
    tools = tool_request(extra or {})
    if tools is None:
        return None, sampling
    return tools, tools.constrain(sampling)
