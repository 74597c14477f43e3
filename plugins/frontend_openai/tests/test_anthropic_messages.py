"""/v1/messages and /v1/messages/count_tokens through the official ``anthropic`` SDK: answers
whole and streamed, what reaches the engine, Anthropic's error envelope, x-api-key, and a client
that goes away aborting its request (scripted engine)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from minisgl_core.api import ChatMessage

NATURAL = 12  # tokens the scripted engine answers before its EOS


def client_of(server: Any, key: str = "none") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base, api_key=key, max_retries=0)


def ask(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "scripted-model", "max_tokens": 50,
            "messages": [{"role": "user", "content": content}], **extra}


def test_create_answers_a_message(server: Any, engine: Any) -> None:
    message = client_of(server).messages.create(**ask("plain create"))
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == "scripted-model"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == engine.expected_text()  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    prompt = engine.requests_with("plain create")[-1]
    assert message.usage.input_tokens == 2 + 3 and message.usage.output_tokens == NATURAL
    assert prompt.sampling.max_tokens == 50
    short = client_of(server).messages.create(**ask("cut short", max_tokens=3))
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 3


def test_system_prompt_and_sampling_reach_the_engine(server: Any, engine: Any) -> None:
    client_of(server).messages.create(**ask(
        "with a system", system=[{"type": "text", "text": "be brief"}],
        metadata={"user_id": "u1"},
        # this SDK version no longer types the sampling fields; the API still takes them
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 7}))
    request = engine.requests_with("with a system")[-1]
    assert request.messages[0] == ChatMessage("system", "be brief")
    assert request.messages[1] == ChatMessage("user", "with a system")
    sp = request.sampling
    assert (sp.temperature, sp.top_p, sp.top_k) == (0.5, 0.9, 7)
    client_of(server).messages.create(**ask("string system", system="short answers",
                                            stop_sequences=["zeta"]))
    request = engine.requests_with("string system")[-1]
    assert request.messages[0] == ChatMessage("system", "short answers")
    assert request.sampling.stop == ("zeta",)


def test_stream_sends_anthropics_events(server: Any, engine: Any) -> None:
    client = client_of(server)
    with client.messages.stream(**ask("streamed")) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].text == engine.expected_text()  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == NATURAL
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    raw = [k for k in kinds if k not in ("text",)]  # the SDK adds "text" helper events
    assert raw[:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    # the wire itself: every event has its ``event:`` line and a ping comes early
    with httpx.stream("POST", server.base + "/v1/messages", timeout=10,
                      json=ask("raw stream", stream=True)) as r:
        lines = [line for line in r.iter_lines() if line]
    names = [line[len("event: "):] for line in lines if line.startswith("event: ")]
    assert len(names) == len([line for line in lines if line.startswith("data: ")])
    assert names[:2] == ["message_start", "ping"]
    assert names.count("content_block_delta") == NATURAL


def test_count_tokens(server: Any) -> None:
    counted = client_of(server).messages.count_tokens(
        model="scripted-model", system="be brief",
        messages=[{"role": "user", "content": "count these three"}])
    assert counted.input_tokens == 5  # the scripted tokenizer: one id per word


def test_tool_use_and_result_turns_reach_the_engine(server: Any, engine: Any) -> None:
    tools = [{"name": "get_weather", "description": "weather of a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    client_of(server).messages.create(**{
        **ask("unused"), "tools": tools, "tool_choice": {"type": "auto"},
        "messages": [
            {"role": "user", "content": "weather turn"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "call it", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "text", "text": "and now?"}]}]})
    request = engine.requests_with("weather turn")[-1]
    roles = [m.role for m in request.messages]
    assert roles == ["user", "assistant", "tool", "user"]
    call = request.messages[1].tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("toolu_1", "get_weather",
                                                   '{"city": "Paris"}')
    assert request.messages[1].content == "Checking."
    assert request.messages[2] == ChatMessage("tool", "sunny", tool_call_id="toolu_1")
    assert '"get_weather"' in (request.tools or "")


@pytest.mark.parametrize(("body", "fragment"), [
    ({"model": "scripted-model", "messages": [{"role": "user", "content": "x"}]},
     "max_tokens"),
    (ask("", messages=[{"role": "user", "content": [{"type": "video", "text": "x"}]}]),
     "video"),
    (ask("", messages=[{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]), "image"),
    (ask("bad choice", tools=[{"name": "f", "input_schema": {"type": "object"}}],
         tool_choice={"type": "maybe"}), "tool_choice"),
])
def test_bad_input_gets_anthropics_error_shape(server: Any, body: dict[str, Any],
                                               fragment: str) -> None:
    r = httpx.post(server.base + "/v1/messages", json=body, timeout=10)
    assert r.status_code == 400, r.text
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert fragment in error["error"]["message"]
    if "max_tokens" in body:  # the SDK itself refuses a call without it
        with pytest.raises(anthropic.BadRequestError):
            client_of(server).messages.create(**body)


def test_unknown_model_is_not_found(server: Any) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        client_of(server).messages.create(**ask("x", model="claude-none"))
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_the_api_key_as_x_api_key(keyed_server: Any) -> None:
    message = client_of(keyed_server, "sk-test-key").messages.create(**ask("keyed"))
    assert message.stop_reason == "end_turn"
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client_of(keyed_server, "wrong").messages.create(**ask("keyed"))
    assert caught.value.status_code == 401
    assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    bearer = httpx.post(keyed_server.base + "/v1/messages", json=ask("bearer"), timeout=10,
                        headers={"Authorization": "Bearer sk-test-key"})
    assert bearer.status_code == 200


def test_disconnect_aborts(server: Any, engine: Any, kit: Any) -> None:
    marker = "[first-delay=5] messages gone"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base + "/v1/messages", json=ask(marker), timeout=0.5)
    assert kit.wait_for(lambda: len(engine.requests_with(marker)) == 1)
    rid = engine.requests_with(marker)[0].request_id
    assert kit.wait_for(lambda: rid in engine.aborted and rid not in engine.active)
    assert kit.wait_for(lambda: not server.frontend.app.state.live)


def test_unknown_routes_and_methods_answer_in_anthropics_shape(server: Any) -> None:
    missing = httpx.post(server.base + "/v1/messages/batches", json={}, timeout=10)
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    wrong = httpx.get(server.base + "/v1/messages", timeout=10)
    assert wrong.status_code == 405 and wrong.json()["type"] == "error"
    elsewhere = httpx.post(server.base + "/v1/nothing", json={}, timeout=10)
    assert elsewhere.status_code == 404 and "type" not in elsewhere.json()  # OpenAI's there


def test_an_oversized_body_is_request_too_large(server: Any, kit: Any) -> None:
    body = ask("x" * (kit.max_body_bytes + 10))
    r = httpx.post(server.base + "/v1/messages", json=body, timeout=10)
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "request_too_large"


def test_an_overloaded_engine_is_529_and_a_stopped_one_503(server: Any, engine_state: Any,
                                                           kit: Any) -> None:
    engine_state.reject = kit.overloaded("the waiting queue is full")
    with pytest.raises(anthropic.OverloadedError) as caught:
        client_of(server).messages.create(**ask("busy"))
    assert caught.value.status_code == 529
    assert caught.value.body["error"] == {  # type: ignore[index]
        "type": "overloaded_error", "message": "the waiting queue is full"}
    engine_state.reject = None
    engine_state.is_healthy = False
    r = httpx.post(server.base + "/v1/messages", json=ask("down"), timeout=10)
    assert r.status_code == 503 and r.json()["error"]["type"] == "api_error"
