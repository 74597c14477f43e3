"""``response_format`` and vLLM's ``structured_outputs`` (and older ``guided_*``) -> a grammar.

The request shape is checked here (400 naming the field). Whether the schema, regex or grammar
itself converts is the engine's to say: it compiles every grammar on its own thread anyway, and
rejects one that does not convert as the request's first delta, before any header is sent, so a
bad one is still a 400, named here after its field (``name_grammar_error``). Checking it here
too would load xgrammar, and with it torch and transformers, into the frontend's process
(+300 MB and ~1.3 s at the first structured request).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from minisgl_core.api import SamplingParams, StructuredOutput
from minisgl_frontend_openai.errors import APIError, bad_request

KEYS = ("json", "regex", "choice", "grammar", "json_object")
MAX_CHOICES = 1024  # strings in one `choice` list
# vLLM's pre-0.10 request extras, each the same as one key of structured_outputs
GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
          "guided_grammar": "grammar"}


def _schema_text(schema: Any, param: str) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            raise bad_request(f"'{param}' is not valid JSON", param=param) from None
    if not isinstance(schema, dict | bool):
        raise bad_request(f"'{param}' must be a JSON schema (an object)", param=param)
    return json.dumps(schema)


def _response_format(value: Any) -> StructuredOutput | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise bad_request("'response_format' must be an object with a 'type'",
                          param="response_format")
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput("json")
    if kind != "json_schema":
        raise bad_request(f"response_format type '{kind[:40]}' is not supported (use text, "
                          "json_object or json_schema)", param="response_format.type")
    spec = value.get("json_schema")
    if not isinstance(spec, Mapping):
        raise bad_request("'response_format.json_schema' must be an object with a 'schema'",
                          param="response_format.json_schema")
    if "schema" not in spec:
        raise bad_request("'response_format.json_schema.schema' is required",
                          param="response_format.json_schema.schema")
    return StructuredOutput("json_schema",
                            _schema_text(spec["schema"], "response_format.json_schema.schema"))


def _one_of(value: Any, param: str) -> StructuredOutput | None:
    """``structured_outputs``: exactly one of json, regex, choice, grammar (json_object)."""
    if not isinstance(value, Mapping):
        raise bad_request(f"'{param}' must be an object", param=param)
    given = {k: v for k, v in value.items() if k in KEYS and v is not None and v is not False}
    if len(given) != 1:
        raise bad_request(f"'{param}' takes exactly one of json, regex, choice, grammar or "
                          f"json_object, got {', '.join(given) or 'none'}", param=param)
    ((key, v),) = given.items()
    where = f"{param}.{key}"
    if key == "json":
        return StructuredOutput("json_schema", _schema_text(v, where))
    if key == "json_object":
        return StructuredOutput("json")
    if key == "choice":
        if (not isinstance(v, list) or not v or len(v) > MAX_CHOICES
                or not all(isinstance(c, str) and c for c in v)):
            raise bad_request(f"'{where}' must be a list of 1 to {MAX_CHOICES} non-empty strings",
                              param=where)
        return StructuredOutput("choice", json.dumps(v))
    if not isinstance(v, str) or not v:
        raise bad_request(f"'{where}' must be a non-empty string", param=where)
    return StructuredOutput(key, v)


def structured_output(extra: Mapping[str, Any]) -> tuple[StructuredOutput | None, str | None]:
    """The grammar a request's extra fields ask for, and the field that asked (or None, None)."""
    found: list[tuple[StructuredOutput, str]] = []
    if extra.get("response_format") is not None:
        spec = _response_format(extra["response_format"])
        if spec is not None:
            found.append((spec, "response_format"))
    if extra.get("structured_outputs") is not None:
        spec = _one_of(extra["structured_outputs"], "structured_outputs")
        if spec is not None:
            found.append((spec, "structured_outputs"))
    guided = {k: v for k, v in extra.items() if k in GUIDED and v is not None}
    if guided:
        key = next(iter(guided))
        spec = _one_of({GUIDED[k]: v for k, v in guided.items()}, key)
        if spec is not None:
            found.append((spec, key))
    if len(found) > 1:
        raise bad_request(f"send one of {' or '.join(p for _, p in found)}, not both",
                          param=found[1][1])
    return found[0] if found else (None, None)


def with_structured(extra: Mapping[str, Any] | None, sampling: SamplingParams
                    ) -> tuple[SamplingParams, str | None]:
    """``sampling`` constrained as the request's extra fields ask (400 if their shape is bad),
    and the field that carries the grammar (None: no grammar)."""
    spec, param = structured_output(extra or {})
    if spec is None:
        return sampling, None
    return msgspec.structs.replace(sampling, structured=spec), param


def name_grammar_error(exc: APIError, param: str | None) -> APIError:
    """The engine's rejection of a grammar, as a 400 naming the request field it came from."""
    if exc.code == "invalid_grammar" and param is not None and exc.param is None:
        return APIError(exc.status, f"{param}: {exc.message}", param=param, code=exc.code)
    return exc
