"""/tokenize, /detokenize (vLLM's shapes), --served-model-name and /v1/models/{id}."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest


@pytest.fixture(scope="module")
def scripted(kit: SimpleNamespace) -> Any:
    return kit.ScriptedEngineClient()


@pytest.fixture(scope="module")
def named(kit: SimpleNamespace, scripted: Any) -> Iterator[Any]:
    running = kit.RunningServer(scripted, served_model_name=("my-model", "alias-b"))
    yield running
    running.stop()


def test_tokenize_asks_the_engine_and_answers_in_vllms_shape(named: Any, scripted: Any,
                                                             http: httpx.Client) -> None:
    r = http.post(f"{named.base}/tokenize", json={"prompt": "Hello big world",
                                                   "return_token_strs": True})
    assert r.status_code == 200, r.text
    # the scripted tokenizer: <s>, then one id per word (its length)
    assert r.json() == {"count": 4, "max_model_len": 256, "tokens": [0, 5, 3, 5],
                        "token_strs": ["<s>", "Hello", "big", "world"]}
    asked = scripted.tokenized[-1]
    assert asked.prompt == "Hello big world" and asked.owner == scripted.frontend_id
    back = http.post(f"{named.base}/detokenize", json={"tokens": [5, 3]})
    assert back.status_code == 200 and back.json() == {"prompt": "t5 t3"}


def test_tokenize_chat_hands_over_the_template_inputs(named: Any, scripted: Any,
                                                      http: httpx.Client) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    r = http.post(f"{named.base}/tokenize", json={"model": "alias-b", "messages": messages,
                                                   "tools": tools})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == [2, 6, 2] and r.json()["token_strs"] is None
    asked = scripted.tokenized[-1]
    assert [(m.role, m.content) for m in asked.messages] == [("system", "Be brief."),
                                                              ("user", "hi")]
    assert asked.prompt is None and '"name": "f"' in (asked.tools or "")


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "prompt"),
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": ""}, "prompt"),
    ("/tokenize", {"messages": [{"role": "wizard", "content": "b"}]}, "messages.0.role"),
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/detokenize", {"tokens": [1, 10**6]}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {"tokens": "abc"}, "tokens"),
])
def test_bad_tokenize_bodies_are_400(named: Any, http: httpx.Client, path: str,
                                     body: dict[str, Any], param: str) -> None:
    r = http.post(f"{named.base}{path}", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_unknown_model_is_404(named: Any, http: httpx.Client) -> None:
    r = http.post(f"{named.base}/tokenize", json={"prompt": "x", "model": "scripted-model"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_served_model_names_replace_the_engine_name(named: Any, http: httpx.Client) -> None:
    listed = [m["id"] for m in http.get(f"{named.url}/models").json()["data"]]
    assert listed == ["my-model", "alias-b"]
    assert http.get(f"{named.url}/models/alias-b").json()["id"] == "alias-b"
    assert http.get(f"{named.url}/models/scripted-model").status_code == 404
    for name in ("my-model", "alias-b", None):
        r = http.post(f"{named.url}/chat/completions", json={
            "model": name, "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 3})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "my-model"
        assert r.json()["usage"]["completion_tokens"] == 3


def test_tokenize_while_the_engine_is_down_is_503(named: Any, scripted: Any,
                                                  http: httpx.Client) -> None:
    scripted.is_healthy = False
    try:
        r = http.post(f"{named.base}/tokenize", json={"prompt": "x"})
    finally:
        scripted.is_healthy = True
    assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
