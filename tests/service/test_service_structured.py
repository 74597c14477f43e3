"""Structured outputs end to end: the official client's ``parse`` against `minisgl launch`.

The tiny random model writes nonsense, but grammar-constrained nonsense: every answer must parse
and validate, which is what these tests check (bounded schemas, so each ends well inside
max_tokens).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import httpx
import jsonschema
import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

from minisgl_core.testing.service import RunningService, launch_service

SERVICE_ARGS = ["--max-seq-len-override", "512", "--num-pages", "256", "--page-size", "16"]


class Point(BaseModel):
    x: Annotated[int, Field(ge=-5, le=5)]
    y: Annotated[int, Field(ge=0, le=9)]


class Shape(BaseModel):
    kind: Literal["circle", "square"]
    filled: bool
    corners: list[Point] = Field(max_length=2)


class Person(BaseModel):
    name: Annotated[str, Field(max_length=5)]
    role: Literal["admin", "user", "guest"]
    age: Annotated[int, Field(ge=0, le=99)]
    home: Point


MODELS: list[type[BaseModel]] = [Point, Shape, Person]


@pytest.fixture(scope="module")
def service(tiny_model: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[RunningService]:
    svc = launch_service(tiny_model, transport="zmq", args=SERVICE_ARGS,
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def client(service: RunningService) -> OpenAI:
    return OpenAI(base_url=f"{service.url}/v1", api_key="none", max_retries=0)


def _idle(m: dict[str, float]) -> bool:
    return (m.get("minisgl_kv_pages_free") == m.get("minisgl_kv_pages_total")
            and m.get("minisgl_requests_running") == 0
            and m.get("minisgl_requests_waiting") == 0
            and m.get("minisgl_frontend_requests_inflight") == 0)


@pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])
def test_parse_returns_a_valid_object(client: OpenAI, service: RunningService,
                                      model: type[BaseModel]) -> None:
    done = client.chat.completions.parse(
        model=service.model_name(), messages=[{"role": "user", "content": "Describe one."}],
        response_format=model, max_completion_tokens=200, temperature=0.8, seed=3, n=2)
    for choice in done.choices:
        assert choice.finish_reason == "stop", choice.message.content
        assert isinstance(choice.message.parsed, model)
    assert _idle(service.wait_metrics(_idle, what="the service idle"))


def test_json_object_and_streaming(client: OpenAI, service: RunningService) -> None:
    schema = Person.model_json_schema()
    stream = client.chat.completions.create(
        model=service.model_name(), messages=[{"role": "user", "content": "hi"}], stream=True,
        max_tokens=200, temperature=0, response_format={"type": "json_schema", "json_schema": {
            "name": "person", "schema": schema, "strict": True}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)


def test_structured_outputs_extra_on_both_routes(client: OpenAI, service: RunningService) -> None:
    model = service.model_name()
    picked = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Pick"}], max_tokens=20,
        extra_body={"structured_outputs": {"choice": ["left", "right", "up"]}})
    assert picked.choices[0].message.content in ("left", "right", "up")
    comp = client.completions.create(
        model=model, prompt="Mail:", max_tokens=30, temperature=1.0, seed=1,
        extra_body={"structured_outputs": {"regex": r"[a-z]{3,6}@example\.(com|org)"}})
    assert re.fullmatch(r"[a-z]{3,6}@example\.(com|org)", comp.choices[0].text)
    fmt = client.completions.create(
        model=model, prompt="Point:", max_tokens=60, temperature=0,
        extra_body={"response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "schema": Point.model_json_schema()}}})
    Point.model_validate_json(fmt.choices[0].text)


def test_bad_schema_is_400_and_the_service_stays_idle(client: OpenAI,
                                                      service: RunningService) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=service.model_name(), messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {
                "name": "bad", "schema": {"type": "object", "properties": {
                    "a": {"$ref": "#/definitions/missing"}}}}})
    assert "missing" in err.value.message
    r = httpx.post(f"{service.url}/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "x"}],
        "structured_outputs": {"grammar": "root ::= undefined_rule"}})
    assert r.status_code == 400 and "undefined_rule" in r.json()["error"]["message"]
    assert _idle(service.wait_metrics(_idle, what="the service idle"))


# grammars that do not convert: the engine rejects them as the first delta, before any header;
# the frontend answers 400 naming the field the grammar came in
UNCOMPILABLE = [
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "foo"}}}},
     "response_format"),
    ({"structured_outputs": {"regex": "(("}}, "structured_outputs"),
    ({"structured_outputs": {"grammar": "root ::= nothing"}}, "structured_outputs"),
    ({"structured_outputs": {"json": {"$ref": "#/nowhere"}}}, "structured_outputs"),
    ({"guided_regex": "[a-"}, "guided_regex"),
    ({"tools": [{"function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "nope"}}}}}], "tool_choice": "required"}, "tools"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_grammar_that_does_not_convert_is_a_400_naming_its_field(
        service: RunningService, stream: bool) -> None:
    for fields, param in UNCOMPILABLE:
        r = httpx.post(f"{service.url}/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "x"}], "stream": stream, **fields})
        assert r.status_code == 400, (fields, r.text)
        error = r.json()["error"]
        assert error["param"] == param and error["code"] == "invalid_grammar", error
        assert error["message"].startswith(f"{param}: invalid "), error
    assert _idle(service.wait_metrics(_idle, what="the service idle"))


def test_the_frontend_never_loads_xgrammar(service: RunningService) -> None:
    """Grammars compile in the scheduler only: the launcher stays without torch."""
    httpx.post(f"{service.url}/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "schema": Point.model_json_schema()}}}).raise_for_status()
    maps = Path(f"/proc/{service.proc.pid}/maps")
    if not maps.exists():
        pytest.skip("no /proc here")
    assert "libtorch" not in maps.read_text()
