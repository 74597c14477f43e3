"""The default model under grammars: greedy answers are schema-valid JSON that ends with EOS.

A few cases only; `minisgl bench structured` runs the 20 schemas and 20 tool sets through the
service and the official client.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from minisgl_core import LLM, SamplingParams
from minisgl_core.wire.schema import StructuredOutput

pytestmark = pytest.mark.model

CASES = [
    ("Describe the city of Lyon.", {
        "type": "object", "properties": {
            "name": {"type": "string", "maxLength": 40},
            "country": {"type": "string", "maxLength": 40},
            "population": {"type": "integer", "minimum": 0, "maximum": 50000000}},
        "required": ["name", "country", "population"], "additionalProperties": False}),
    ("Make a todo list for moving house.", {
        "type": "object", "properties": {"tasks": {
            "type": "array", "minItems": 1, "maxItems": 4, "items": {
                "type": "object", "properties": {
                    "title": {"type": "string", "maxLength": 40}, "done": {"type": "boolean"},
                    "priority": {"enum": ["low", "high"]}},
                "required": ["title", "done", "priority"]}}}, "required": ["tasks"]}),
    ("Classify: 'I love this phone!'", {
        "type": "object", "properties": {
            "label": {"enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["label", "confidence"]}),
]


@pytest.fixture(scope="module")
def llm() -> LLM:
    # one thread: two OpenMP threads crawl when other processes hold the cores (6x on a busy
    # host, against 2.5x for one)
    return LLM(num_threads=1)


def test_schemas_give_valid_json(llm: LLM) -> None:
    chats = [[{"role": "user", "content": q}] for q, _ in CASES]
    params = [SamplingParams(max_tokens=300, temperature=0,
                             structured=StructuredOutput("json_schema", json.dumps(schema)))
              for _, schema in CASES]
    for out, (_, schema) in zip(llm.chat(chats, params), CASES, strict=True):
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), schema)
