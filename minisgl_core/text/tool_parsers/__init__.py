"""Tool-call parsers of the common model families, and which one a chat template speaks.

``hermes`` (Hermes, Qwen 2.5 / 3: ``<tool_call>{json}</tool_call>``), ``llama3_json`` (Llama 3.x:
a ``{"name", "parameters"}`` answer, optionally after ``<|python_tag|>``), ``mistral``
(``[TOOL_CALLS]`` and a JSON list) and ``qwen3_coder`` (``<function=NAME>`` XML). ``--tool-call-
parser NAME`` picks one; otherwise ``detect`` reads the chat template.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from minisgl_core.text.tool_parsers.base import FamilyParser
from minisgl_core.text.tool_parsers.json_calls import Llama3JsonParser, MistralParser
from minisgl_core.text.tool_parsers.tagged import HermesParser, Qwen3CoderParser

DEFAULT = "hermes"  # what the built-in prompt for templates without tools asks for
FAMILIES: dict[str, type[FamilyParser]] = {
    p.name: p for p in (HermesParser, Llama3JsonParser, MistralParser, Qwen3CoderParser)}
# families whose call marker is a special token: the answer keeps special tokens to show it
KEEP_SPECIAL_TOKENS = frozenset({"mistral"})


def parser_names() -> list[str]:
    """Every family's name, as ``--tool-call-parser`` takes it."""
    return sorted(FAMILIES)


def detect(template: Any) -> str:
    """The family a chat template's tool calls are written in (``hermes`` when it says none)."""
    if not isinstance(template, str):
        return DEFAULT
    if "<function=" in template:
        return "qwen3_coder"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3_json"
    return DEFAULT


def family_parser(name: str | None, functions: Collection[str]) -> FamilyParser:
    """A fresh parser of free answers in family ``name`` (None: the default, ``hermes``)."""
    return FAMILIES.get(name or DEFAULT, FAMILIES[DEFAULT])(functions)
