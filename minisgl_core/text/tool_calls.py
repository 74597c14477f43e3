"""A request's ``tools``, ``tool_choice`` and ``parallel_tool_calls``: checks and grammars.

The values are OpenAI's shapes (a frontend with its own wire format converts to them first, so
every frontend builds the same prompt and the same grammar). ``auto`` leaves the model free and
the answer is parsed for ``<tool_call>`` blocks (``tool_parser``); ``required`` and a named
function constrain the output with a grammar built from the functions' parameter schemas, so
arguments are valid by construction: a named function's output is its arguments object,
``required`` writes a JSON array of ``{"name", "arguments"}`` objects (one item unless
``parallel_tool_calls``), as vLLM does. Bad input raises ``ToolRequestError``, a
``RequestRejected``, which each frontend maps as it maps every rejection.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from minisgl_core.rejection import RequestRejected
from minisgl_core.sampling import SamplingParams, StructuredOutput
from minisgl_core.text.tool_parser import ToolCallParser

MAX_TOOLS = 128
NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class ToolRequestError(RequestRejected):
    """Tools a request cannot be served with: the message, the field at fault, an error code."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code, param=param)


@dataclass(frozen=True)
class ToolRequest:
    """A request's tools, checked: ``mode`` is none, auto, required or named."""

    functions: dict[str, dict[str, Any]]  # name -> parameters schema
    template_json: str  # the tools list as JSON text, for the chat template
    mode: str
    named: str | None = None
    parallel: bool = True

    def constrain(self, sampling: SamplingParams) -> SamplingParams:
        """``sampling`` with the grammar ``required`` or a named function imposes."""
        if self.mode == "named":
            assert self.named is not None
            schema: dict[str, Any] = self.functions[self.named]
        elif self.mode == "required":
            schema = _calls_schema(self.functions, self.parallel)
        else:
            return sampling
        if sampling.structured is not None:
            raise ToolRequestError("tool_choice 'required' or a named function cannot be "
                                   "combined with response_format or structured_outputs",
                                   "tool_choice")
        return msgspec.structs.replace(
            sampling, structured=StructuredOutput("json_schema", json.dumps(schema)))

    def parser(self, family: str | None = None) -> ToolCallParser:
        """A fresh parser for one answer to this request; ``family`` is the model's tool-call
        format (``tool_parsers``; None: the one its first delta names, else hermes)."""
        return ToolCallParser(self.mode, self.functions, self.named, family)


def tool_request(tools: Any, tool_choice: Any = None,
                 parallel_tool_calls: Any = None) -> ToolRequest | None:
    """The checked tools of a request (None when it has none); ToolRequestError if bad."""
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise ToolRequestError("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    if not tools:
        if tool_choice not in (None, "none"):
            raise ToolRequestError("'tool_choice' needs 'tools'", "tool_choice")
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise ToolRequestError(f"'tools' must be a list of at most {MAX_TOOLS} tools", "tools")
    functions: dict[str, dict[str, Any]] = {}
    for i, tool in enumerate(tools):
        name, parameters = _function(tool, f"tools.{i}")
        if name in functions:
            raise ToolRequestError(f"tools[{i}]: the function name '{name}' is used twice",
                                   f"tools.{i}.function.name")
        functions[name] = parameters
    mode, named = _choice(tool_choice, functions)
    return ToolRequest(functions, json.dumps(tools, ensure_ascii=False), mode, named,
                       True if parallel_tool_calls is None else parallel_tool_calls)


def _function(tool: Any, where: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
        raise ToolRequestError(f"'{where}' must be a tool of type 'function'", f"{where}.type")
    fn = tool.get("function")
    if not isinstance(fn, Mapping):
        raise ToolRequestError(f"'{where}.function' must be an object", f"{where}.function")
    name = fn.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ToolRequestError(f"'{where}.function.name' must be 1-64 letters, digits, _ . : "
                               "or -", f"{where}.function.name")
    parameters = fn.get("parameters", EMPTY_PARAMETERS)
    if not isinstance(parameters, Mapping):
        raise ToolRequestError(f"'{where}.function.parameters' must be a JSON schema object",
                               f"{where}.function.parameters")
    return name, dict(parameters)


def _choice(choice: Any, functions: Mapping[str, Any]) -> tuple[str, str | None]:
    if choice is None:
        return "auto", None
    if choice in ("none", "auto", "required"):
        return choice, None
    fn = choice.get("function") if isinstance(choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str) or choice.get("type", "function") != "function":
        raise ToolRequestError("'tool_choice' must be none, auto, required or {\"type\": "
                               "\"function\", \"function\": {\"name\": ...}}", "tool_choice")
    if name not in functions:
        raise ToolRequestError(f"tool_choice names the function '{name[:64]}', which is not in "
                               "'tools'", "tool_choice", "unknown_function")
    return "named", name


def _calls_schema(functions: Mapping[str, dict[str, Any]], parallel: bool) -> dict[str, Any]:
    """A JSON array of calls; each function's ``$defs`` are hoisted to the root, renamed."""
    defs: dict[str, Any] = {}
    items = []
    for name, params in functions.items():
        params = _hoist(name, params, defs)
        items.append({"type": "object", "properties": {"name": {"const": name},
                                                       "arguments": params},
                      "required": ["name", "arguments"], "additionalProperties": False})
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": items}}
    if not parallel:
        schema["maxItems"] = 1
    if defs:
        schema["$defs"] = defs
    return schema


def _hoist(fn: str, params: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    local = {**params.get("definitions", {}), **params.get("$defs", {})}
    if not local:
        return params
    prefix = re.sub(r"[^A-Za-z0-9_]", "_", fn)

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rewrite(v) for k, v in node.items() if k not in ("$defs", "definitions")}
            ref = out.get("$ref")
            if isinstance(ref, str):
                for root in ("#/$defs/", "#/definitions/"):
                    if ref.startswith(root):
                        out["$ref"] = f"#/$defs/{prefix}__{ref[len(root):]}"
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for key, value in local.items():
        defs[f"{prefix}__{key}"] = rewrite(value)
    result: dict[str, Any] = rewrite(params)
    return result
