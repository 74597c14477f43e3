"""Errors over real HTTP: the OpenAI envelope, 400/401/404/405/413/429/503, errors mid-stream, and
a server that keeps answering after each of them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

LONG = "Z" * 5000  # must never come back in an error message


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def assert_error(response: httpx.Response, status: int, *, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == kind and error["message"]
    assert LONG[:50] not in error["message"] and len(error["message"]) <= 500
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


def still_serving(server: Any, http: httpx.Client) -> None:
    r = http.post(server.url + "/completions", json={"prompt": "still here", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == " alpha beta"


BAD_CHAT = [
    ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_k": -2}, "top_k"),
    ({"min_p": 2}, "min_p"), ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"), ({"repetition_penalty": 0},
                                                       "repetition_penalty"),
    ({"n": 0}, "n"), ({"n": 17}, "n"), ({"stop": [f"s{i}" for i in range(17)]}, "stop"),
    ({"stop": [""]}, "stop"), ({"stop": 5}, "stop"), ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "ten"}, "max_tokens"), ({"max_completion_tokens": 0},
                                            "max_completion_tokens"),
    ({"max_tokens": 3, "max_completion_tokens": 4}, "max_completion_tokens"),
    ({"temperature": "hot"}, "temperature"), ({"ignore_eos": "yes"}, "ignore_eos"),
    ({"seed": 2**64}, "seed"), ({"n": 2.0}, "n"), ({"logprobs": "yes"}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21},
                                            "top_logprobs"),
    ({"logit_bias": {"five": 1}}, "logit_bias"),
    ({"logit_bias": {"-5": 1}}, "logit_bias"), ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {str(i): 1 for i in range(1025)}}, "logit_bias"),
    ({"logit_bias": {"5": "up"}}, "logit_bias.5"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": "{"}}},
     "response_format.json_schema.schema"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
    ({"structured_outputs": {}}, "structured_outputs"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice"),
    ({"structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"}},
     "structured_outputs"),
    ({"tools": [{"type": "function", "function": {"name": "f g"}}]}, "tools.0.function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools.0.type"),
    ({"tools": {"f": 1}}, "tools"),
    ({"tools": [{"function": {"name": "f"}}, {"function": {"name": "f"}}]},
     "tools.1.function.name"),
    ({"tools": [{"function": {"name": "f", "parameters": 3}}]}, "tools.0.function.parameters"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"function": {"name": "f"}}], "tool_choice": "always"}, "tool_choice"),
    ({"tools": [{"function": {"name": "f"}}], "tool_choice": {"type": "function",
                                                              "function": {"name": "g"}}},
     "tool_choice"),
    ({"tools": [{"function": {"name": "f"}}], "tool_choice": "required",
      "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"tools": [{"function": {"name": "f"}}], "parallel_tool_calls": "yes"},
     "parallel_tool_calls"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [
        {"id": "1", "function": {"name": "f", "arguments": "{}"}}]}]}, "messages.0.tool_calls"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options"),
    ({"best_of": 2}, "best_of"), ({"min_tokens": -1}, "min_tokens"),
    ({"min_tokens": 9, "max_tokens": 8}, "min_tokens"),
    ({"messages": []}, "messages"), ({"messages": [{"role": "robot", "content": "x"}]},
                                     "messages.0.role"),
    ({"messages": [{"content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages.0.content"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
]


@pytest.mark.parametrize(("fields", "param"), BAD_CHAT, ids=[p for _, p in BAD_CHAT])
def test_bad_chat_parameters_are_400(server: Any, fields: dict[str, Any], param: str,
                                     http: httpx.Client) -> None:
    body = {"messages": chat(LONG), **fields}
    error = assert_error(http.post(server.url + "/chat/completions", json=body), 400,
                         param=param)
    assert param.split(".")[0] in error["message"]


BAD_COMPLETIONS = [
    {"prompt": ""}, {"prompt": []}, {"prompt": [[]]}, {"prompt": [-1]}, {"prompt": [1, "a"]},
    {"prompt": [[1], "a"]}, {"prompt": {"text": "x"}}, {"prompt": ["x"] * 65},
    {"prompt": ["x"] * 5, "n": 16}, {"prompt": "x", "echo": "yes"},
    {"prompt": "x", "max_tokens": 0}, {"prompt": "x", "prompt_logprobs": 21},
    {"prompt": "x", "prompt_logprobs": 1, "stream": True},
    {"prompt": "x", "suffix": "y"}, {"prompt": "x", "logprobs": 21},
    {"prompt": "x", "logprobs": True}, {"prompt": "x", "logprobs": -1},
]


@pytest.mark.parametrize("body", BAD_COMPLETIONS)
def test_bad_completion_bodies_are_400(server: Any, body: dict[str, Any],
                                       http: httpx.Client) -> None:
    assert_error(http.post(server.url + "/completions", json=body), 400)


def test_missing_prompt_and_unsupported_params_name_the_field(server: Any,
                                                              http: httpx.Client) -> None:
    error = assert_error(http.post(server.url + "/completions", json={"max_tokens": 2}), 400,
                         param="prompt")
    assert "required" in error["message"]
    assert_error(http.post(server.url + "/completions", json={"prompt": "x", "suffix": "y"}),
                 400, param="suffix", code="unsupported_parameter")
    still_serving(server, http)


@pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]", b'"text"', b"\xff\xfe",
                                 b'{"prompt": "' + LONG.encode()])
def test_malformed_bodies_are_400(server: Any, raw: bytes, http: httpx.Client) -> None:
    r = http.post(server.url + "/completions", content=raw,
                   headers={"content-type": "application/json"})
    assert_error(r, 400)
    still_serving(server, http)


def test_openai_client_sees_bad_request(server: Any) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="scripted-model", messages=chat("x"),
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "x"}})
    assert "'response_format.json_schema.schema' is required" in err.value.message


def test_unknown_model_route_and_method(server: Any, http: httpx.Client) -> None:
    for path in ("/chat/completions", "/completions"):
        body = {"model": "gpt-nope", "messages": chat("x"), "prompt": "x"}
        assert_error(http.post(server.url + path, json=body), 404, param="model",
                     code="model_not_found")
    assert_error(http.get(server.url + "/nothing/here"), 404, code="not_found")
    assert_error(http.get(server.url + "/chat/completions"), 405, code="method_not_allowed")
    still_serving(server, http)


def test_context_length_exceeded_is_400_before_any_stream(server: Any, http: httpx.Client) -> None:
    long_prompt = " ".join(["w"] * 300)
    for stream in (False, True):
        r = http.post(server.url + "/completions", json={"prompt": long_prompt, "stream": stream})
        error = assert_error(r, 400, code="context_length_exceeded")
        assert "256" in error["message"] and "300" in error["message"]
    r = http.post(server.url + "/completions", json={"prompt": [3, 4000], "stream": True})
    assert_error(r, 400, param="prompt")
    still_serving(server, http)


def _events(response: httpx.Response) -> list[Any]:
    body = response.read()
    assert body.endswith(b"data: [DONE]\n\n")
    return [json.loads(e[6:]) for e in body.split(b"\n\n")[:-2]]


def test_error_after_the_stream_started_is_an_error_event(server: Any, http: httpx.Client) -> None:
    body = {"messages": chat("[error-after=3]"), "max_tokens": 10, "stream": True}
    with http.stream("POST", server.url + "/chat/completions", json=body) as r:
        assert r.status_code == 200
        events = _events(r)
    *chunks, last = events
    assert last == {"error": {"message": "scripted failure", "type": "server_error",
                              "param": None, "code": "scripted"}}
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == \
        ["", " alpha", " beta", " gamma"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    r = http.post(server.url + "/chat/completions", json={**body, "stream": False})
    assert_error(r, 500, code="scripted", kind="server_error")
    still_serving(server, http)


def test_engine_side_abort_is_not_a_success(server: Any, http: httpx.Client) -> None:
    body = {"prompt": "[abort]", "max_tokens": 3, "stream": True}
    with http.stream("POST", server.url + "/completions", json=body) as r:
        events = _events(r)
    assert events[-1]["error"]["code"] == "request_aborted"
    assert all(e.get("choices", [{}])[0].get("finish_reason") is None for e in events[:-1])
    r = http.post(server.url + "/completions", json={**body, "stream": False})
    assert_error(r, 503, code="request_aborted", kind="server_error")


def test_body_size_limit_is_413(server: Any, kit: Any, http: httpx.Client) -> None:
    big = {"prompt": "x" * (kit.max_body_bytes + 10)}
    assert_error(http.post(server.url + "/completions", json=big), 413,
                 code="request_too_large")

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
        yield b'{"prompt": "'
        for _ in range(kit.max_body_bytes // 1000 + 2):
            yield b"y" * 1000
        yield b'"}'

    r = http.post(server.url + "/completions", content=chunked(),
                   headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers
    assert_error(r, 413, code="request_too_large")
    still_serving(server, http)


@pytest.mark.parametrize("stream", [False, True])
def test_overloaded_is_429_and_unavailable_is_503(server: Any, engine_state: Any, kit: Any,
                                                  stream: bool, http: httpx.Client) -> None:
    body = {"prompt": "busy", "max_tokens": 2, "stream": stream}
    engine_state.reject = kit.overloaded("the waiting queue is full")
    assert_error(http.post(server.url + "/completions", json=body), 429,
                 kind="overloaded_error")
    engine_state.reject = kit.unavailable("the scheduler died")
    error = assert_error(http.post(server.url + "/completions", json=body), 503,
                         kind="server_error")
    assert error["message"] == "the scheduler died"
    engine_state.reject = None
    still_serving(server, http)


def test_unhealthy_engine_is_503_and_health_follows(server: Any, engine_state: Any,
                                                    http: httpx.Client) -> None:
    assert http.get(server.base + "/health").status_code == 200
    engine_state.is_healthy = False
    assert_error(http.get(server.base + "/health"), 503, kind="server_error")
    assert_error(http.post(server.url + "/chat/completions", json={"messages": chat("x")}),
                 503, code="engine_unavailable", kind="server_error")
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.completions.create(model="scripted-model", prompt="x")
    engine_state.is_healthy = True
    assert http.get(server.base + "/health").json() == {"status": "ok"}
    still_serving(server, http)


def test_api_key(keyed_server: Any, http: httpx.Client) -> None:
    url = keyed_server.url + "/completions"
    body = {"prompt": "keyed", "max_tokens": 1}
    error = assert_error(http.post(url, json=body), 401, code="invalid_api_key")
    assert "missing" in error["message"]
    assert http.post(url, json=body).headers["www-authenticate"] == "Bearer"
    for header in ("Bearer sk-wrong", "Bearer sk-test-key2", "sk-test-key", "Basic sk-test-key"):
        assert_error(http.post(url, json=body, headers={"authorization": header}), 401)
    assert_error(http.get(keyed_server.url + "/models"), 401)
    ok = http.post(url, json=body, headers={"authorization": "Bearer sk-test-key"})
    assert ok.status_code == 200
    assert http.get(keyed_server.base + "/health").status_code == 200
    assert http.get(keyed_server.base + "/metrics").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed_server.url, api_key="sk-wrong",
                      max_retries=0).models.list()
    good = openai.OpenAI(base_url=keyed_server.url, api_key="sk-test-key", max_retries=0)
    assert good.completions.create(model="scripted-model", prompt="k", max_tokens=1).choices
