"""The OpenAI routes over real HTTP: models, chat and text completions, n, parameters, streaming."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from minisgl_frontend_openai.schemas import INT64_MAX, INT64_MIN, for_choice

from minisgl_core.wire.schema import SamplingParams

NATURAL = " alpha beta gamma delta epsilon zeta alpha beta gamma delta epsilon zeta"


def sdk(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=10)


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def sse_events(body: bytes) -> list[bytes]:
    """Split a raw SSE body into event payloads, checking the framing on the way."""
    assert body.endswith(b"data: [DONE]\n\n")
    events = body.split(b"\n\n")
    assert events[-1] == b""
    payloads = []
    for event in events[:-1]:
        assert event.startswith(b"data: ") and b"\n" not in event, event
        payloads.append(event[len(b"data: "):])
    assert payloads.count(b"[DONE]") == 1 and payloads[-1] == b"[DONE]"
    return payloads[:-1]


def raw_stream(server: Any, http: httpx.Client, path: str,
               body: dict[str, Any]) -> list[dict[str, Any]]:
    with http.stream("POST", server.url + path, json=body, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [json.loads(p) for p in sse_events(response.read())]


def test_models_lists_the_served_name_and_aliases(server: Any, http: httpx.Client) -> None:
    client = sdk(server)
    assert [m.id for m in client.models.list()] == ["scripted-model", "scripted-alias"]
    card = http.get(server.url + "/models/scripted-model").json()
    assert card["id"] == "scripted-model" and card["max_model_len"] == 256
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("no-such-model")
    assert err.value.code == "model_not_found"


def test_chat_non_streaming(server: Any, engine: Any) -> None:
    out = sdk(server).chat.completions.create(model="scripted-model",
                                              messages=chat("chat plain one"))
    assert out.object == "chat.completion" and out.id.startswith("chatcmpl-")
    choice = out.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == NATURAL
    assert choice.finish_reason == "stop" and choice.index == 0
    assert out.usage is not None
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) \
        == (6, 12, 18)
    (request,) = engine.requests_with("chat plain one")
    assert request.owner == engine.frontend_id and request.sampling.max_tokens is None
    assert [(m.role, m.content) for m in request.messages] == [("user", "chat plain one")]


def test_chat_stream_has_role_chunk_null_reasons_and_one_final(server: Any) -> None:
    client = sdk(server)
    full = client.chat.completions.create(model="scripted-model", messages=chat("stream a"),
                                          max_tokens=5)
    chunks = list(client.chat.completions.create(model="scripted-model",
                                                 messages=chat("stream a"), max_tokens=5,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    assert [c.choices[0].finish_reason for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    assert all(c.usage is None and c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) \
        == full.choices[0].message.content == " alpha beta gamma delta epsilon"


def test_raw_sse_framing_and_no_usage_unless_asked(server: Any, http: httpx.Client) -> None:
    events = raw_stream(server, http, "/chat/completions",
                        {"messages": chat("raw framing"), "max_tokens": 3, "stream": True})
    assert all("usage" not in e and e["choices"] for e in events)
    assert all(e["model"] == "scripted-model" and isinstance(e["created"], int) for e in events)
    assert len({e["id"] for e in events}) == 1
    finals = [e for e in events if e["choices"][0]["finish_reason"] is not None]
    assert len(finals) == 1 and finals[0] is events[-1] and finals[0]["choices"][0]["delta"] == {}


def test_include_usage_adds_one_usage_chunk_last(server: Any, http: httpx.Client) -> None:
    events = raw_stream(server, http, "/chat/completions", {
        "messages": chat("usage please"), "max_tokens": 4, "stream": True,
        "stream_options": {"include_usage": True}})
    *body, last = events
    assert last["choices"] == [] and last["usage"] == {
        "prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    assert all(e["usage"] is None and e["choices"] for e in body)
    events = raw_stream(server, http, "/completions", {"prompt": "usage off", "max_tokens": 2,
                                                 "stream": True,
                                                 "stream_options": {"include_usage": False}})
    assert all("usage" not in e for e in events)


@pytest.mark.parametrize("stream", [False, True])
def test_n_choices_are_separate_engine_requests(server: Any, engine: Any, stream: bool,
                                                http: httpx.Client) -> None:
    marker = f"n three {stream}"
    body = {"messages": chat(marker), "n": 3, "max_tokens": 2, "seed": 41, "stream": stream}
    if stream:
        events = raw_stream(server, http, "/chat/completions", body)
        roles = [e["choices"][0]["index"] for e in events
                 if e["choices"][0]["delta"].get("role") == "assistant"]
        finals = [e["choices"][0]["index"] for e in events
                  if e["choices"][0]["finish_reason"] is not None]
        assert sorted(roles) == sorted(finals) == [0, 1, 2]
    else:
        out = http.post(server.url + "/chat/completions", json=body).json()
        assert [c["index"] for c in out["choices"]] == [0, 1, 2]
        assert all(c["message"]["content"] == " alpha beta" for c in out["choices"])
        assert out["usage"]["prompt_tokens"] == 6 and out["usage"]["completion_tokens"] == 6
    requests = engine.requests_with(marker)
    assert len({r.request_id for r in requests}) == 3
    assert sorted(r.sampling.seed for r in requests) == [41, 42, 43]


def test_seed_offsets_wrap_inside_int64() -> None:
    sp = SamplingParams(seed=INT64_MAX)
    assert for_choice(sp, 1).seed == INT64_MIN and for_choice(sp, 0) is sp
    assert for_choice(SamplingParams(), 3).seed is None


@pytest.mark.parametrize(("prompt", "sent"), [
    ("alpha prompt", ["alpha prompt"]),
    (["first prompt", "second prompt here"], ["first prompt", "second prompt here"]),
    ([5, 6, 7], [(5, 6, 7)]),
    ([[5, 6], [7, 8, 9]], [(5, 6), (7, 8, 9)]),
])
def test_completions_prompt_forms_with_n(server: Any, engine: Any, prompt: Any,
                                         sent: list[Any]) -> None:
    before = len(engine.requests)
    out = sdk(server).completions.create(model="scripted-model", prompt=prompt, n=2,
                                         max_tokens=3)
    assert out.object == "text_completion" and out.id.startswith("cmpl-")
    assert [c.index for c in out.choices] == list(range(2 * len(sent)))
    assert all(c.text == " alpha beta gamma" and c.finish_reason == "length"
               for c in out.choices)
    requests = sorted(engine.requests[before:], key=lambda r: int(r.request_id.rsplit("-", 1)[1]))
    got = [r.prompt if r.prompt is not None else r.token_ids for r in requests]
    assert got == [p for p in sent for _ in range(2)]
    lengths = [len(p) if isinstance(p, tuple) else len(p.split()) for p in sent]
    assert out.usage is not None and out.usage.prompt_tokens == sum(lengths)
    assert out.usage.completion_tokens == 6 * len(sent)


def test_completions_stream_per_prompt(server: Any) -> None:
    texts: dict[int, str] = {}
    finals: dict[int, list[str]] = {}
    for chunk in sdk(server).completions.create(model="scripted-model", prompt=["a b", "c"],
                                                max_tokens=2, stream=True):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason is not None:
                finals.setdefault(c.index, []).append(c.finish_reason)
    assert texts == {0: " alpha beta", 1: " alpha beta"}
    assert finals == {0: ["length"], 1: ["length"]}


def test_every_sampling_parameter_is_mapped(server: Any, engine: Any) -> None:
    sdk(server).chat.completions.create(
        model="scripted-alias", messages=chat("all params"), max_completion_tokens=7,
        temperature=0.5, top_p=0.9, seed=3, stop=["zz", "yy"], presence_penalty=0.5,
        frequency_penalty=-0.5, user="someone",
        extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "ignore_eos": True,
                    "stop_token_ids": [2, 3], "skip_special_tokens": False})
    (request,) = engine.requests_with("all params")
    assert request.sampling == SamplingParams(
        max_tokens=7, temperature=0.5, top_p=0.9, top_k=5, min_p=0.1, presence_penalty=0.5,
        frequency_penalty=-0.5, repetition_penalty=1.2, seed=3, stop=("zz", "yy"),
        stop_token_ids=(2, 3), ignore_eos=True, skip_special_tokens=False)


def test_max_tokens_spellings(server: Any, engine: Any, http: httpx.Client) -> None:
    for marker, extra in [("mt plain", {"max_tokens": 4}),
                          ("mt both", {"max_tokens": 4, "max_completion_tokens": 4}),
                          ("mt none", {}), ("mt topk", {"top_k": -1})]:
        r = http.post(server.url + "/chat/completions", json={"messages": chat(marker), **extra})
        assert r.status_code == 200, r.text
    assert engine.requests_with("mt plain")[0].sampling.max_tokens == 4
    assert engine.requests_with("mt both")[0].sampling.max_tokens == 4
    assert engine.requests_with("mt none")[0].sampling.max_tokens is None
    assert engine.requests_with("mt topk")[0].sampling.top_k == 0


def test_stop_strings_cut_the_answer(server: Any, engine: Any) -> None:
    client = sdk(server)
    out = client.completions.create(model="scripted-model", prompt="stop one", stop=" gamma")
    assert out.choices[0].text == " alpha beta" and out.choices[0].finish_reason == "stop"
    assert engine.requests_with("stop one")[0].sampling.stop == (" gamma",)
    chunks = list(client.completions.create(model="scripted-model", prompt="stop two",
                                            stop=["ta", " delta"], stream=True))
    assert "".join(c.choices[0].text for c in chunks) == " alpha be"
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"


def test_unknown_extra_fields_are_ignored(server: Any, http: httpx.Client) -> None:
    r = http.post(server.url + "/chat/completions", json={
        "messages": [{"role": "system", "content": "be brief", "name": "x"},
                     {"role": "developer", "content": [{"type": "text", "text": "hi"}]},
                     {"role": "assistant", "content": None}, {"role": "user", "content": "q"}],
        "max_tokens": 1, "user": "u1", "metadata": {"k": "v"}, "store": False,
        "some_future_field": 1, "logprobs": False, "tool_choice": "none",
        "response_format": {"type": "text"}})
    assert r.status_code == 200, r.text


def test_unicode_stream_equals_non_stream(server: Any) -> None:
    client = sdk(server)
    full = client.chat.completions.create(model="scripted-model", messages=chat("[unicode]"),
                                          max_tokens=6, temperature=0)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="scripted-model", messages=chat("[unicode]"), max_tokens=6, temperature=0,
        stream=True))
    assert text == full.choices[0].message.content == "h\u00e9 \U0001f600 \u4e2d\u6587 \u00fc!"
    assert "\ufffd" not in text


def test_cached_tokens_are_reported_only_when_present(server: Any, http: httpx.Client) -> None:
    cached = http.post(server.url + "/completions",
                        json={"prompt": "[cached] four words here", "max_tokens": 1}).json()
    assert cached["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}
    plain = http.post(server.url + "/completions", json={"prompt": "x y", "max_tokens": 1})
    assert "prompt_tokens_details" not in plain.json()["usage"]


def test_chat_logprobs_in_the_openai_shape(server: Any, engine: Any) -> None:
    client = sdk(server)
    full = client.chat.completions.create(model="scripted-model", messages=chat("lp chat"),
                                          max_tokens=4, logprobs=True, top_logprobs=2)
    content = full.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [c.token for c in content] == [" alpha", " beta", " gamma", " delta"]
    assert [c.logprob for c in content] == [0.0, -0.5, -1.0, -1.5]
    assert content[1].bytes == list(b" beta")
    assert [(t.token, t.logprob) for t in content[0].top_logprobs] == [("alt0", -1.0),
                                                                      ("alt1", -2.0)]
    chunks = list(client.chat.completions.create(
        model="scripted-model", messages=chat("lp chat"), max_tokens=4, logprobs=True,
        top_logprobs=2, stream=True))
    streamed = [c for ch in chunks if ch.choices[0].logprobs
                for c in ch.choices[0].logprobs.content or []]
    assert [c.model_dump() for c in streamed] == [c.model_dump() for c in content]
    assert engine.requests_with("lp chat")[0].sampling.logprobs == 2
    plain = client.chat.completions.create(model="scripted-model", messages=chat("lp none"),
                                           max_tokens=2, logprobs=False)
    assert plain.choices[0].logprobs is None
    assert engine.requests_with("lp none")[0].sampling.logprobs is None


def test_completion_logprobs_in_the_legacy_shape(server: Any, engine: Any,
                                                 http: httpx.Client) -> None:
    body = {"prompt": "lp legacy", "max_tokens": 3, "logprobs": 1}
    (choice,) = http.post(server.url + "/completions", json=body).json()["choices"]
    assert choice["logprobs"] == {"tokens": [" alpha", " beta", " gamma"],
                                  "token_logprobs": [0.0, -0.5, -1.0],
                                  "top_logprobs": [{"alt0": -1.0}] * 3,
                                  "text_offset": [0, 6, 11]}
    events = raw_stream(server, http, "/completions", {**body, "stream": True})
    parts = [e["choices"][0]["logprobs"] for e in events if e["choices"][0]["logprobs"]]
    assert [o for p in parts for o in p["text_offset"]] == [0, 6, 11]  # offsets run on
    assert [t for p in parts for t in p["tokens"]] == choice["logprobs"]["tokens"]
    assert engine.requests_with("lp legacy")[0].sampling.logprobs == 1
