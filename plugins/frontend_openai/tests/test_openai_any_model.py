"""The model-name policy: an unknown `model` is a 404 by default (vLLM's way) and is answered by
the served model with ``accept_any_model`` (mini-sglang's and SGLang's way, `python -m minisgl`)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from minisgl_frontend_openai.server import check_options

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def any_model(kit: SimpleNamespace) -> Iterator[Any]:
    running = kit.RunningServer(kit.ScriptedEngineClient(), options={"accept_any_model": True})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def strict(kit: SimpleNamespace) -> Iterator[Any]:
    running = kit.RunningServer(kit.ScriptedEngineClient())
    yield running
    running.stop()


def test_any_name_is_answered_and_the_answer_names_the_served_model(
        any_model: Any, http: httpx.Client) -> None:
    for name in ("qwen3", "gpt-4o-mini", "scripted-model", None):
        chat = http.post(f"{any_model.url}/chat/completions", json={**CHAT, "model": name})
        assert chat.status_code == 200, chat.text
        assert chat.json()["model"] == "scripted-model"
    done = http.post(f"{any_model.url}/completions",
                     json={"model": "qwen3", "prompt": "a b", "max_tokens": 2})
    assert done.status_code == 200 and done.json()["model"] == "scripted-model"
    card = http.get(f"{any_model.url}/models/qwen3")
    assert card.status_code == 200 and card.json()["id"] == "scripted-model"
    listed = http.get(f"{any_model.url}/models").json()["data"]
    assert [m["id"] for m in listed] == ["scripted-model"]  # lists what is served, only


def test_by_default_an_unknown_name_is_a_404(strict: Any, http: httpx.Client) -> None:
    chat = http.post(f"{strict.url}/chat/completions", json={**CHAT, "model": "qwen3"})
    assert chat.status_code == 404, chat.text
    assert chat.json()["error"]["code"] == "model_not_found"
    assert http.get(f"{strict.url}/models/qwen3").status_code == 404
    served = http.post(f"{strict.url}/chat/completions", json={**CHAT, "model": "scripted-model"})
    assert served.status_code == 200 and served.json()["model"] == "scripted-model"


def test_the_option_is_a_boolean() -> None:
    assert check_options({})["accept_any_model"] is False
    with pytest.raises(ValueError, match="accept_any_model must be"):
        check_options({"accept_any_model": "yes"})
