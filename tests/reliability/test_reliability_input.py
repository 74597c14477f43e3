"""Bad input: named cases, hypothesis properties, a schema fuzzer and garbage on the sockets.

Every HTTP answer must be a 2xx or a 4xx with the OpenAI error envelope (never a 5xx, never a
hang), and after each group the workers are alive, the engine idle and a normal request works.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_fuzz import (
    DROP_LINES,
    check_answer_or_error,
    check_error_envelope,
    dumps,
    garbage_sent,
    served_openapi,
    wait_log,
)
from reliability_support import AUTH, CONTEXT, Service, ServicePool, idle_view, is_idle

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]
MARKER = "Z7q" * 4000  # 12 kB that must never come back whole in an error message
FUZZ_EXAMPLES = 40  # per property; the fuzz part stays well under a minute
SCHEMA_EXAMPLES = 60

# name -> (route, JSON body or raw bytes); every one must be a 4xx with the envelope
NAMED_CASES: dict[str, tuple[str, object]] = {
    "invalid JSON": (CHAT, b"{not json"),
    "truncated JSON": (CHAT, b'{"messages": [{"role": "user", "content": "x"'),
    "empty body": (CHAT, b""),
    "body is an array": (COMPLETIONS, b"[1, 2, 3]"),
    "deeply nested JSON": (CHAT, b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    "wrong type: messages string": (CHAT, {"messages": "hi"}),
    "wrong type: max_tokens string": (CHAT, {"messages": MSG, "max_tokens": "5"}),
    "wrong type: stream string": (CHAT, {"messages": MSG, "stream": "yes"}),
    "wrong type: stop number": (CHAT, {"messages": MSG, "stop": 5}),
    "wrong type: model number": (CHAT, {"model": 5, "messages": MSG}),
    "wrong type: prompt object": (COMPLETIONS, {"prompt": {"a": 1}}),
    "huge max_tokens": (CHAT, {"messages": MSG, "max_tokens": 10**30}),
    "huge seed": (CHAT, {"messages": MSG, "seed": 10**40}),
    "huge top_k": (CHAT, {"messages": MSG, "top_k": 2**63}),
    "huge repetition_penalty": (CHAT, {"messages": MSG, "repetition_penalty": 1e308}),
    "max_tokens over the context": (CHAT, {"messages": MSG, "max_tokens": CONTEXT}),
    "negative max_tokens": (CHAT, {"messages": MSG, "max_tokens": -1}),
    "zero max_tokens": (CHAT, {"messages": MSG, "max_tokens": 0}),
    "negative temperature": (CHAT, {"messages": MSG, "temperature": -1}),
    "NaN temperature": (CHAT, {"messages": MSG, "temperature": float("nan")}),
    "infinite top_p": (CHAT, {"messages": MSG, "top_p": float("inf")}),
    "NaN presence_penalty": (COMPLETIONS, {"prompt": "a", "presence_penalty": float("nan")}),
    "min_p above one": (CHAT, {"messages": MSG, "min_p": 2}),
    "empty messages": (CHAT, {"messages": []}),
    "message without role": (CHAT, {"messages": [{"content": "x"}]}),
    "unknown role": (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}),
    "tool_calls on a user turn": (CHAT, {"messages": [{"role": "user", "content": "x",
                                                       "tool_calls": [{"id": "1", "function": {
                                                           "name": "f", "arguments": "{}"}}]}]}),
    "image content part": (CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}),
    "empty prompt": (COMPLETIONS, {"prompt": ""}),
    "empty token list": (COMPLETIONS, {"prompt": [[]]}),
    "prompt over the context": (COMPLETIONS, {"prompt": "hello " * 3000}),
    "messages over the context": (CHAT, {"messages": [{"role": "user",
                                                       "content": "hello " * 3000}]}),
    "prompt over the body limit": (COMPLETIONS, {"prompt": "a" * 5_000_000}),
    "invalid UTF-8": (CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe\xc0"}]}'),
    "lone surrogate escape": (CHAT, b'{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    "token id outside the vocabulary": (COMPLETIONS, {"prompt": [10**6], "max_tokens": 2}),
    "negative token id": (COMPLETIONS, {"prompt": [-1], "max_tokens": 2}),
    "token id beyond int64": (COMPLETIONS, {"prompt": [2**70], "max_tokens": 2}),
    "float token id": (COMPLETIONS, {"prompt": [1.5], "max_tokens": 2}),
    "n too large": (CHAT, {"messages": MSG, "n": 1000}),
    "n zero": (CHAT, {"messages": MSG, "n": 0}),
    "too many prompts x n": (COMPLETIONS, {"prompt": ["a"] * 64, "n": 16}),
    "hundreds of stop strings": (CHAT, {"messages": MSG, "stop": [f"s{i}" for i in range(300)]}),
    "empty stop string": (CHAT, {"messages": MSG, "stop": [""]}),
    "stream_options without stream": (CHAT, {"messages": MSG,
                                             "stream_options": {"include_usage": True}}),
    "logit_bias key not a token id": (COMPLETIONS, {"prompt": "a", "logit_bias": {"x1": 5}}),
    "logit_bias token outside the vocabulary": (COMPLETIONS, {"prompt": "a",
                                                              "logit_bias": {"99999999": 5}}),
    "negative prompt_logprobs": (COMPLETIONS, {"prompt": "a", "prompt_logprobs": -1}),
    "prompt_logprobs above 20": (CHAT, {"messages": MSG, "prompt_logprobs": 21}),
    "prompt_logprobs string": (COMPLETIONS, {"prompt": "a", "prompt_logprobs": "3"}),
    "prompt_logprobs with stream": (COMPLETIONS, {"prompt": "a", "prompt_logprobs": 1,
                                                  "stream": True}),
    "echo on chat": (CHAT, {"messages": MSG, "echo": True}),
    "echo not a bool": (COMPLETIONS, {"prompt": "a", "echo": "yes"}),
    "echo with logprobs above 20": (COMPLETIONS, {"prompt": "a", "echo": True, "logprobs": 21}),
    "zero max_tokens without echo": (COMPLETIONS, {"prompt": "a", "max_tokens": 0}),
    "echo with negative max_tokens": (COMPLETIONS, {"prompt": "a", "echo": True,
                                                    "max_tokens": -1}),
    "response_format of unknown type": (CHAT, {"messages": MSG,
                                                "response_format": {"type": "yaml"}}),
    "json_schema without a schema": (CHAT, {"messages": MSG, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x"}}}),
    "json_schema of unknown type": (CHAT, {"messages": MSG, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": MARKER}}}}),
    "json_schema with a dangling $ref": (COMPLETIONS, {"prompt": "a", "response_format": {
        "type": "json_schema", "json_schema": {"schema": {"$ref": "#/$defs/none"}}}}),
    "json_schema as broken JSON text": (CHAT, {"messages": MSG, "structured_outputs": {
        "json": "{" + MARKER}}),
    "regex that does not parse": (COMPLETIONS, {"prompt": "a",
                                                "structured_outputs": {"regex": "(" + MARKER}}),
    "grammar with an undefined rule": (CHAT, {"messages": MSG, "structured_outputs": {
        "grammar": "root ::= missing_rule"}}),
    "empty choice list": (CHAT, {"messages": MSG, "structured_outputs": {"choice": []}}),
    "two structured_outputs keys": (CHAT, {"messages": MSG, "structured_outputs": {
        "regex": "a", "choice": ["a"]}}),
    "response_format and structured_outputs": (CHAT, {
        "messages": MSG, "response_format": {"type": "json_object"},
        "structured_outputs": {"regex": "a"}}),
    "tools not a list": (CHAT, {"messages": MSG, "tools": {"name": "f"}}),
    "tool name with spaces": (CHAT, {"messages": MSG, "tools": [
        {"type": "function", "function": {"name": "get weather"}}]}),
    "tool parameters not an object": (CHAT, {"messages": MSG, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": [1]}}]}),
    "tool_choice without tools": (CHAT, {"messages": MSG, "tool_choice": "required"}),
    "tool_choice naming an unknown function": (CHAT, {"messages": MSG, "tools": [
        {"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": MARKER}}}),
    "required tool with a schema that does not compile": (CHAT, {"messages": MSG, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "nope"}}}}}],
        "tool_choice": "required"}),
    "required tool_choice and response_format": (CHAT, {
        "messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "required", "response_format": {"type": "json_object"}}),
    "tokenize with prompt and messages": ("/tokenize", {"prompt": "a", "messages": MSG}),
    "detokenize id outside the vocabulary": ("/detokenize", {"tokens": [10**6]}),
    "unknown model": (CHAT, {"model": MARKER, "messages": MSG}),
    "long unknown role": (CHAT, {"messages": [{"role": MARKER, "content": "x"}]}),
}


@pytest.fixture(scope="module")
def svc(pool: ServicePool) -> Service:
    return pool.get("zmq")


def still_serving(svc: Service) -> None:
    """Workers alive, engine idle, and an ordinary request still answered."""
    assert svc.alive(), svc.log()[-3000:]
    m = svc.wait_metrics(is_idle, what="the service idle")
    assert is_idle(m), idle_view(m)
    ok = svc.post(COMPLETIONS, {"prompt": "hello", "max_tokens": 2})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("name", list(NAMED_CASES))
def test_named_bad_request(svc: Service, name: str) -> None:
    path, body = NAMED_CASES[name]
    data = body if isinstance(body, bytes) else dumps(body)
    for stream in (False, True):
        if stream and isinstance(body, dict) and not {"stream", "stream_options"} & set(body):
            data = dumps({**body, "stream": True})
        elif stream:
            continue
        resp = httpx.post(f"{svc.url}{path}", content=data, timeout=60,
                          headers={**AUTH, "content-type": "application/json"})
        problem = check_error_envelope(resp)
        assert problem is None, f"{name} (stream={stream}): {problem}"
        assert MARKER not in resp.text and len(resp.text) < 2000, resp.text[:300]


def test_bad_requests_leave_the_service_serving(svc: Service) -> None:
    still_serving(svc)


# hypothesis: bodies mixing plausible and absurd values for every field
_ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)
_SMALL = st.integers(min_value=1, max_value=6)
_FIELDS = {
    "max_tokens": _SMALL | _ANY, "temperature": st.floats() | _ANY, "top_p": st.floats(),
    "top_k": st.integers(-2, 2**40), "min_p": st.floats(), "n": st.integers(-1, 20) | _ANY,
    "stop": st.lists(st.text(max_size=4), max_size=20) | st.text(max_size=4) | _ANY,
    "seed": st.integers(), "presence_penalty": st.floats(), "frequency_penalty": st.floats(),
    "repetition_penalty": st.floats(), "ignore_eos": st.booleans() | _ANY,
    "stream": st.booleans() | _ANY, "stream_options": _ANY, "logprobs": _ANY, "user": _ANY,
    "model": st.just("tiny-llama") | _ANY, "stop_token_ids": st.lists(st.integers(), max_size=3),
}
_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "x"])
                                  | _ANY, "content": st.text(max_size=40) | _ANY})


def _body(required: str, value: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    optional = st.fixed_dictionaries({}, optional=_FIELDS)
    return st.builds(lambda req, opt: {required: req, **opt}, value, optional) | _ANY


FUZZ_SETTINGS = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                         derandomize=True, suppress_health_check=list(HealthCheck))


@FUZZ_SETTINGS
@given(body=_body("messages", st.lists(_MESSAGE, max_size=3) | _ANY))
def test_property_chat_bodies(svc: Service, body: object) -> None:
    problem = check_answer_or_error(svc.post(CHAT, body))
    assert problem is None, f"{json.dumps(body, allow_nan=True)[:500]}: {problem}"


@FUZZ_SETTINGS
@given(body=_body("prompt", st.text(max_size=40) | st.lists(st.integers(-2, 2**33), max_size=5)
                  | st.lists(st.text(max_size=10), max_size=3) | _ANY))
def test_property_completion_bodies(svc: Service, body: object) -> None:
    problem = check_answer_or_error(svc.post(COMPLETIONS, body))
    assert problem is None, f"{json.dumps(body, allow_nan=True)[:500]}: {problem}"


@FUZZ_SETTINGS
@given(data=st.binary(max_size=300))
def test_property_raw_bytes(svc: Service, data: bytes) -> None:
    resp = httpx.post(f"{svc.url}{CHAT}", content=data, timeout=60,
                      headers={**AUTH, "content-type": "application/json"})
    problem = check_answer_or_error(resp)
    assert problem is None, f"{data[:200]!r}: {problem}"


def test_schema_fuzz(svc: Service) -> None:
    """Schemathesis, positive and negative cases, against the frontend's OpenAPI document."""
    import schemathesis
    from schemathesis import GenerationMode

    document = served_openapi(svc)
    assert document is not None, "the frontend serves no /openapi.json"
    schema = schemathesis.openapi.from_dict(document)
    strategy = st.one_of(schema.as_strategy(GenerationMode.POSITIVE),
                         schema.as_strategy(GenerationMode.NEGATIVE))
    seen: dict[int, int] = {}

    @settings(max_examples=SCHEMA_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def call(case: object) -> None:
        resp = case.call(base_url=svc.url, headers=AUTH, timeout=60)  # type: ignore[attr-defined]
        seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
        assert resp.status_code < 500, f"{case!r}: {resp.status_code} {resp.text[:300]}"
        if resp.status_code >= 400:
            err = resp.json().get("error")
            assert isinstance(err, dict) and {"message", "type", "param", "code"} <= set(err), \
                f"{case!r}: {resp.text[:300]}"

    call()
    print(f"schema fuzz statuses: {dict(sorted(seen.items()))}")
    assert any(400 <= s < 500 for s in seen) and any(s < 300 for s in seen), seen
    still_serving(svc)


def test_frontend_serves_its_openapi_document(svc: Service) -> None:
    assert served_openapi(svc) is not None


@pytest.mark.parametrize("transport", ["zmq", "nng"])
def test_garbage_on_every_socket_is_dropped_and_logged(pool: ServicePool, transport: str) -> None:
    svc = pool.get(transport)
    with garbage_sent(svc) as channels:
        kinds = {c.split(".", 1)[0] for c in channels}
        assert kinds == set(DROP_LINES), channels
        missing = wait_log(svc, list(DROP_LINES.values()))
    assert not missing, f"not logged: {missing}\n{svc.log()[-2000:]}"
    still_serving(svc)
