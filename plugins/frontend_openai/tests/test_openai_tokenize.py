"""/tokenize, /detokenize (vLLM's shapes), --served-model-name and /v1/models/{id}."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from minisgl_core.testing.tiny import make_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tok") / "tiny", "llama")


@pytest.fixture(scope="module")
def named(kit: SimpleNamespace, tiny_dir: Path) -> Iterator[Any]:
    running = kit.RunningServer(kit.ScriptedEngineClient(), model=str(tiny_dir),
                                served_model_name=("my-model", "alias-b"))
    yield running
    running.stop()


def test_tokenize_prompt_matches_the_tokenizer(named: Any, http: httpx.Client,
                                               tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    r = http.post(f"{named.base}/tokenize", json={"prompt": "Hello world!",
                                                   "return_token_strs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == tok.encode("Hello world!")
    assert body["count"] == len(body["tokens"])
    assert body["max_model_len"] == 256
    assert body["token_strs"] == tok.convert_ids_to_tokens(body["tokens"])
    back = http.post(f"{named.base}/detokenize", json={"tokens": body["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": "Hello world!"}


def test_tokenize_chat_applies_the_template(named: Any, http: httpx.Client,
                                            tiny_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    r = http.post(f"{named.base}/tokenize", json={"model": "alias-b", "messages": messages})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == tok.encode(text, add_special_tokens=False)
    assert r.json()["token_strs"] is None
    bare = http.post(f"{named.base}/tokenize", json={"messages": messages,
                                                      "add_generation_prompt": False})
    assert bare.json()["count"] < r.json()["count"]


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
