"""Reasoning models' output split into reasoning and answer: ``--reasoning-parser qwen3`` or
``deepseek_r1`` (vLLM's and SGLang's names).

The ``<think>...</think>`` block of a chat answer is its reasoning (``reasoning_content``), the
rest its content; tool-call parsing and structured outputs see the content only. Where the
answer starts depends on the prompt the chat template wrote:

- a prompt that ends inside an open block (DeepSeek-R1's and Qwen3-Thinking's templates end
  with ``<think>\\n``) starts the answer in reasoning, up to ``</think>``;
- a prompt whose last block is closed (Qwen3 with ``enable_thinking: false`` writes an empty
  one) starts it in content, and so does a prompt without any block, except for ``deepseek_r1``,
  whose models begin reasoning on their own (an opening ``<think>`` they write is dropped);
- in content, the first ``<think>...</think>`` block is reasoning, the text around it content.

``ReasoningSplitter`` does this on streamed text, holding back only what may be the start of a
marker, so streamed and whole answers split the same. The leading whitespace of the reasoning and
of the content after a block is dropped, as the models put a newline or two there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

START, END = "<think>", "</think>"
PromptState = Literal["open", "closed", "none"]


@dataclass(frozen=True)
class ReasoningSyntax:
    """How one family of models marks its reasoning."""

    name: str
    start: str = START
    end: str = END
    begins_inside: bool = False  # a prompt without any block starts the answer in reasoning


PARSERS: dict[str, ReasoningSyntax] = {
    "qwen3": ReasoningSyntax("qwen3"),
    "deepseek_r1": ReasoningSyntax("deepseek_r1", begins_inside=True),
}


def parser_names() -> list[str]:
    """The names ``--reasoning-parser`` takes."""
    return sorted(PARSERS)


def syntax_of(name: str) -> ReasoningSyntax:
    """The syntax of parser ``name``; ValueError listing the known ones."""
    try:
        return PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown reasoning parser {name!r} (known: "
                         f"{', '.join(parser_names())})") from None


def prompt_state(prompt: str, syntax: ReasoningSyntax) -> PromptState:
    """Whether the prompt ends inside a reasoning block ("open"), after one ("closed"), or
    has none ("none")."""
    start, end = prompt.rfind(syntax.start), prompt.rfind(syntax.end)
    if start < 0 and end < 0:
        return "none"
    return "open" if start > end else "closed"


def begins_inside(state: PromptState, syntax: ReasoningSyntax) -> bool:
    """Whether an answer to a prompt in ``state`` starts in reasoning."""
    return state == "open" or (state == "none" and syntax.begins_inside)


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (0: none)."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """Splits one answer's streamed text into (reasoning, content) pieces."""

    def __init__(self, syntax: ReasoningSyntax, inside: bool) -> None:
        self.syntax = syntax
        # "before": content that may still open the block; "inside": reasoning; "after": content
        self._state = "inside" if inside else "before"
        self._at_start = True  # inside from the start: a leading start marker is dropped
        self._held = ""
        self._strip_reasoning = True  # leading whitespace of the reasoning
        self._strip_content = False  # leading whitespace of the content after the block

    def feed(self, text: str) -> tuple[str, str]:
        """New text in; the (reasoning, content) that can be told apart so far."""
        reasoning: list[str] = []
        content: list[str] = []
        buf, self._held = self._held + text, ""
        while buf:
            if self._state == "inside":
                buf = self._inside(buf, reasoning, content)
            elif self._state == "before":
                buf = self._before(buf, content)
            else:
                content.append(self._content(buf))
                buf = ""
        return "".join(reasoning), "".join(content)

    def finish(self) -> tuple[str, str]:
        """The end of the answer: whatever was held back, where it belongs."""
        held, self._held = self._held, ""
        if self._state == "inside":
            return self._reasoning(held), ""
        return "", self._content(held)

    def _inside(self, buf: str, reasoning: list[str], content: list[str]) -> str:
        start, end = self.syntax.start, self.syntax.end
        if self._at_start:
            stripped = buf.lstrip()
            if start.startswith(stripped) and len(stripped) < len(start):
                self._held = buf  # may still become the start marker
                return ""
            self._at_start = False
            if stripped.startswith(start):
                buf = stripped[len(start):]
        cut = buf.find(end)
        if cut >= 0:
            reasoning.append(self._reasoning(buf[:cut]))
            self._state, self._strip_content = "after", True
            return buf[cut + len(end):]
        keep = _partial_suffix(buf, end)
        reasoning.append(self._reasoning(buf[:len(buf) - keep]))
        self._held = buf[len(buf) - keep:]
        return ""

    def _before(self, buf: str, content: list[str]) -> str:
        start = self.syntax.start
        cut = buf.find(start)
        if cut >= 0:
            content.append(self._content(buf[:cut]))
            self._state, self._at_start = "inside", False
            return buf[cut + len(start):]
        keep = _partial_suffix(buf, start)
        content.append(self._content(buf[:len(buf) - keep]))
        self._held = buf[len(buf) - keep:]
        return ""

    def _reasoning(self, text: str) -> str:
        if self._strip_reasoning and text:
            text = text.lstrip()
            self._strip_reasoning = not text
        return text

    def _content(self, text: str) -> str:
        if self._strip_content and text:
            text = text.lstrip()
            self._strip_content = not text
        return text


def split(text: str, syntax: ReasoningSyntax, inside: bool) -> tuple[str, str]:
    """A whole answer's (reasoning, content)."""
    splitter = ReasoningSplitter(syntax, inside)
    reasoning, content = splitter.feed(text)
    tail_reasoning, tail_content = splitter.finish()
    return reasoning + tail_reasoning, content + tail_content


__all__ = ["PARSERS", "ReasoningSplitter", "ReasoningSyntax", "begins_inside", "parser_names",
           "prompt_state", "split", "syntax_of"]
