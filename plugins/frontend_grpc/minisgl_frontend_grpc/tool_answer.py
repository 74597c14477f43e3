"""A gRPC answer with tools, split in two: its plain content streams, its calls come at the end.

The text is parsed as it arrives by the core's parser (the one the OpenAI frontend uses), so a
call that may be in the making is held back and never streamed as text.
"""

from __future__ import annotations

from minisgl_core.api import Content, Event, ToolCall, ToolRequest, collect_tool_calls


class ToolAnswer:
    """One answer to a request with tools (tool_choice auto, required or a named function)."""

    def __init__(self, tools: ToolRequest) -> None:
        self._parser = tools.parser()
        self._call_events: list[Event] = []

    def content(self, text: str, *, last: bool, family: str | None = None) -> str:
        """The plain content in the next piece of text (``last``: and all that was held back);
        ``family``: the format of the model's tool calls, as the engine names it."""
        events = self._parser.feed(text, family) if text else []
        if last:
            events += self._parser.finish()
        self._call_events += [e for e in events if not isinstance(e, Content)]
        return "".join(e.text for e in events if isinstance(e, Content))

    def calls(self) -> list[ToolCall]:
        """The calls made so far, whole, in order."""
        return collect_tool_calls(self._call_events)[1]

    def finish_reason(self, reason: str) -> str:
        """``tool_calls`` for an answer that ended by itself after making calls."""
        return self._parser.finish_reason(reason)
