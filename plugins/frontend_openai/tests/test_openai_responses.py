"""POST /v1/responses through the official SDK on the scripted engine: whole and streamed answers,
tool calls and their results, text.format, the store (retrieve, delete, input_items, chains, also
after a restart), disconnects and refusals in OpenAI's error shape."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import msgspec
import openai
import pytest
from minisgl_frontend_openai.response_store import ResponseStore

from minisgl_core.api import ChatMessage, GenerateRequest, TextDelta, ToolCall

NATURAL = " alpha beta gamma delta epsilon zeta alpha beta gamma delta epsilon zeta"
ARGUMENTS = '{"city": "Paris"}'
REQUIRED = f'[{{"name": "get_weather", "arguments": {ARGUMENTS}}}]'
WEATHER = {"type": "function", "name": "get_weather", "description": "today's weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


class ResponsesScript:
    """The scripted engine, plus: a request under a grammar writes ``ARGUMENTS`` (what a named
    call or a JSON schema would let through; ``REQUIRED`` for tool_choice required),
    ``[think]`` reasons first, ``[long]`` generates 200 tokens (ignore_eos), ``[empty]`` ends at
    once."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    async def generate(self, request: GenerateRequest) -> Any:
        last = (request.messages or (ChatMessage("user", ""),))[-1].content
        if request.sampling.structured is not None or "[think]" in last:
            self.base.requests.append(request)
            pieces = [("plan it", ""), (" carefully", "")] if "[think]" in last else []
            text = "done"
            if (grammar := request.sampling.structured) is not None:
                # tool_choice "required" asks for a list of calls, anything else for an object
                required = grammar.kind == "json_schema" and json.loads(grammar.spec).get(
                    "type") == "array"
                text = REQUIRED if required else ARGUMENTS
            pieces += [("", text[i:i + 4]) for i in range(0, len(text), 4)]
            for i, (reasoning, piece) in enumerate(pieces):
                yield TextDelta(request_id=request.request_id, text=piece, reasoning=reasoning,
                                token_ids=(i,), completion_tokens=i + 1, prompt_tokens=7,
                                finish_reason="stop" if i == len(pieces) - 1 else None)
            return
        if "[empty]" in last:
            yield TextDelta(request_id=request.request_id, prompt_tokens=3, finish_reason="stop")
            return
        if "[long]" in last:
            request = msgspec.structs.replace(request, sampling=msgspec.structs.replace(
                request.sampling, ignore_eos=True, max_tokens=200))
        async for delta in self.base.generate(request):
            yield delta


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("responses")


@pytest.fixture(scope="module")
def served(kit: SimpleNamespace, store_dir: Path) -> Iterator[Any]:
    running = kit.RunningServer(ResponsesScript(kit.ScriptedEngineClient()),
                                options={"responses_store_dir": str(store_dir)})
    yield running
    running.stop()


def sdk(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=10)


def engine_request(server: Any, response_id: str) -> GenerateRequest:
    found = [r for r in server.frontend.client.base.requests if r.request_id == response_id]
    assert len(found) == 1, response_id
    return found[0]


def test_create_retrieve_and_the_response_object(served: Any) -> None:
    client = sdk(served)
    out = client.responses.create(model="scripted-model", input="hello there",
                                  instructions="Be brief.", metadata={"k": "v"}, user="u1",
                                  temperature=0.5, top_p=0.9)
    assert out.id.startswith("resp_") and out.object == "response"
    assert out.status == "completed" and out.output_text == NATURAL
    assert [item.type for item in out.output] == ["message"]
    assert out.output[0].content[0].type == "output_text"
    assert out.metadata == {"k": "v"} and out.user == "u1" and out.instructions == "Be brief."
    assert out.usage is not None
    # the scripted engine counts each message's words + 3: "Be brief." and "hello there"
    assert (out.usage.input_tokens, out.usage.output_tokens, out.usage.total_tokens) == (10, 12, 22)
    assert out.usage.output_tokens_details.reasoning_tokens == 0
    sent = engine_request(served, out.id)
    assert sent.messages == (ChatMessage("system", "Be brief."), ChatMessage("user", "hello there"))
    assert (sent.sampling.temperature, sent.sampling.top_p) == (0.5, 0.9)
    again = client.responses.retrieve(out.id)
    assert again.model_dump() == out.model_dump()


def test_max_output_tokens_makes_it_incomplete(served: Any) -> None:
    out = sdk(served).responses.create(model="scripted-model", input="cut short",
                                       max_output_tokens=3)
    assert out.status == "incomplete" and out.incomplete_details is not None
    assert out.incomplete_details.reason == "max_output_tokens"
    assert out.output_text == " alpha beta gamma" and out.output[0].status == "incomplete"


def test_stream_events_and_the_final_response(served: Any) -> None:
    with sdk(served).responses.stream(model="scripted-model", input="stream me") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:5] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added",
                         "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == NATURAL
    assert final.output_text == NATURAL and final.status == "completed"
    assert sdk(served).responses.retrieve(final.id).output_text == NATURAL


def test_forced_tool_call_then_its_result(served: Any) -> None:
    client = sdk(served)
    call = client.responses.create(model="scripted-model", input="weather in Paris?",
                                   tools=[WEATHER],  # type: ignore[list-item]
                                   tool_choice={"type": "function", "name": "get_weather"})
    assert [item.type for item in call.output] == ["function_call"]
    item = call.output[0]
    assert item.type == "function_call" and item.name == "get_weather"
    assert json.loads(item.arguments) == {"city": "Paris"} and item.call_id
    structured = engine_request(served, call.id).sampling.structured
    assert structured is not None and json.loads(structured.spec) == WEATHER["parameters"]
    result = client.responses.create(
        model="scripted-model", previous_response_id=call.id, tools=[WEATHER],  # type: ignore
        input=[{"type": "function_call_output", "call_id": item.call_id, "output": "sunny"}])
    assert result.output_text == NATURAL and result.previous_response_id == call.id
    sent = engine_request(served, result.id).messages
    assert sent == (ChatMessage("user", "weather in Paris?"),
                    ChatMessage("assistant", "", (ToolCall(item.call_id, "get_weather",
                                                           item.arguments),)),
                    ChatMessage("tool", "sunny", tool_call_id=item.call_id))
    # the same turn with the history sent in full instead of by id
    explicit = client.responses.create(model="scripted-model", tools=[WEATHER],  # type: ignore
                                       store=False, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]},
        {"type": "function_call", "call_id": item.call_id, "name": "get_weather",
         "arguments": item.arguments},
        {"type": "function_call_output", "call_id": item.call_id, "output": "sunny"}])
    assert engine_request(served, explicit.id).messages == sent


def test_streamed_tool_call(served: Any) -> None:
    with sdk(served).responses.stream(model="scripted-model", input="stream a call",
                                      tools=[WEATHER],  # type: ignore[list-item]
                                      tool_choice="required") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Paris"}
    assert [o.type for o in final.output] == ["function_call"]


def test_json_schema_text_format_is_the_grammar(served: Any) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    out = sdk(served).responses.create(model="scripted-model", input="a city as JSON", text={
        "format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}})
    assert json.loads(out.output_text) == {"city": "Paris"}
    structured = engine_request(served, out.id).sampling.structured
    assert structured is not None and structured.kind == "json_schema"
    assert json.loads(structured.spec) == schema
    assert out.text is not None and out.text.format is not None
    assert out.text.format.type == "json_schema"
    plain = sdk(served).responses.create(model="scripted-model", input="any JSON",
                                         text={"format": {"type": "json_object"}})
    kind = engine_request(served, plain.id).sampling.structured
    assert kind is not None and kind.kind == "json"


def test_reasoning_becomes_a_reasoning_item(served: Any) -> None:
    client = sdk(served)
    out = client.responses.create(model="scripted-model", input="[think] go",
                                  reasoning={"effort": "medium"})
    assert [o.type for o in out.output] == ["reasoning", "message"]
    reasoning = out.output[0]
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "plan it carefully" and out.output_text == "done"
    assert out.usage is not None and out.usage.output_tokens_details.reasoning_tokens == 2
    with client.responses.stream(model="scripted-model", input="[think] again") as stream:
        kinds = [e.type for e in stream]
    assert kinds.count("response.reasoning_text.delta") == 2
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")


def test_input_items_and_delete(served: Any) -> None:
    client = sdk(served)
    out = client.responses.create(model="scripted-model", input=[
        {"role": "user", "content": "first", "id": "msg_mine"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"role": "user", "content": "second"}])
    items = client.responses.input_items.list(out.id, order="asc")
    assert [(i.type, i.role) for i in items.data] == [  # type: ignore[union-attr]
        ("message", "user"), ("message", "assistant"), ("message", "user")]
    ids = [i.id for i in items.data]
    assert ids[0] == "msg_mine" and len(set(ids)) == 3  # a client's own item id is kept
    later = client.responses.input_items.list(out.id, order="asc", after=ids[0])
    assert [i.id for i in later.data] == ids[1:] and not later.has_more
    newest = client.responses.input_items.list(out.id, limit=1)
    assert newest.data[0].content[0].text == "second"  # type: ignore[union-attr]
    assert newest.has_more
    client.responses.delete(out.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.retrieve(out.id)
    assert err.value.code == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(out.id)
    unstored = client.responses.create(model="scripted-model", input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_a_chain_survives_a_restart(served: Any, kit: SimpleNamespace, store_dir: Path) -> None:
    first = sdk(served).responses.create(model="scripted-model", input="remember Lyon")
    again = kit.RunningServer(ResponsesScript(kit.ScriptedEngineClient()),
                              options={"responses_store_dir": str(store_dir)})
    try:
        nxt = sdk(again).responses.create(model="scripted-model", input="which city?",
                                          previous_response_id=first.id,
                                          instructions="Answer in one word.")
        assert engine_request(again, nxt.id).messages == (
            ChatMessage("system", "Answer in one word."), ChatMessage("user", "remember Lyon"),
            ChatMessage("assistant", NATURAL), ChatMessage("user", "which city?"))
        assert sdk(again).responses.retrieve(first.id).output_text == NATURAL
    finally:
        again.stop()


def test_disconnect_mid_stream_aborts(served: Any, kit: SimpleNamespace) -> None:
    engine = served.frontend.client.base
    body = {"model": "scripted-model", "input": "[slow] [long] gone", "stream": True}
    with httpx.Client(timeout=10) as http, \
            http.stream("POST", served.url + "/responses", json=body) as r:
        assert r.status_code == 200
        for i, _ in enumerate(r.iter_lines()):
            if i == 12:  # created, in_progress, the item, its part, then a few deltas
                break
    assert kit.wait_for(lambda: len(engine.requests_with("[long] gone")) == 1)
    rid = engine.requests_with("[long] gone")[0].request_id
    assert kit.wait_for(lambda: rid in engine.aborted and rid not in engine.active)
    assert kit.wait_for(lambda: not served.frontend.app.state.live
                        and served.frontend.metrics.inflight == 0)


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ({"input": "x", "previous_response_id": "resp_missing"}, 400, "previous_response_id",
     "previous_response_not_found"),
    ({"input": "x", "background": True}, 400, "background", "unsupported_parameter"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, 400, "tools.0.type",
     "unsupported_parameter"),
    ({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, 400,
     "tools.0.type", "unsupported_parameter"),
    ({"input": [{"type": "image_generation_call", "id": "x"}]}, 400, "input.0.type",
     "unsupported_parameter"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}, 400,
     "input.0.content.0", "unsupported_parameter"),
    ({"input": ""}, 400, "input", None),
    ({"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens", None),
    ({"input": "x", "text": {"format": {"type": "grammar"}}}, 400, "text.format.type",
     "unsupported_parameter"),
    ({"input": "x", "model": "other"}, 404, "model", "model_not_found"),
    ({"input": "w " * 300}, 400, "input", "context_length_exceeded"),
    ({"input": "x", "tools": [{"type": "function", "name": "bad name"}]}, 400, "tools.0.name",
     None),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 3}]}, 400,
     "tools.0.parameters", None),
    ({"input": "x", "tools": [WEATHER], "tool_choice": "required",
      "text": {"format": {"type": "json_object"}}}, 400, "tool_choice", None),
    ({"input": [{"type": "reasoning", "summary": []}]}, 400, "input", None),
])
def test_bad_requests_get_the_openai_error_shape(served: Any, body: dict[str, Any], status: int,
                                                 param: str, code: str | None) -> None:
    r = httpx.post(served.url + "/responses", json=body, timeout=10)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert error["type"] == "invalid_request_error" and error["message"]


def test_the_sdk_raises_on_refusals(served: Any) -> None:
    client = sdk(served)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="scripted-model", input="x", background=True)
    assert "background" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="scripted-model", input="x",
                                previous_response_id="resp_nope")
    assert err.value.code == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")


def test_an_engine_error_mid_stream_is_an_error_event(served: Any) -> None:
    body = {"model": "scripted-model", "input": "[error-after=3] fails", "stream": True}
    with httpx.stream("POST", served.url + "/responses", json=body, timeout=10) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line[6:]) for line in lines]
    assert [e["type"] for e in events][:2] == ["response.created", "response.in_progress"]
    last = events[-1]
    assert last["type"] == "error" and last["code"] == "scripted"
    assert last["sequence_number"] == len(events) - 1
    assert not any(e["type"] == "response.completed" for e in events)
    with pytest.raises(openai.APIError, match="scripted failure"), \
            sdk(served).responses.stream(model="scripted-model", input="[error-after=2]") as s:
        list(s)


def test_the_store_is_lazy_bounded_and_lasting(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "store", max_responses=3, max_age_s=100)
    assert not (tmp_path / "store").exists()  # nothing is created until a response is stored
    now = time.time()
    for i in range(5):
        store.put({"id": f"resp_{i}", "created_at": now - 10 + i}, [{"id": f"m{i}"}], [])
    assert [store.get(f"resp_{i}") is not None for i in range(5)] == [False, False, True, True,
                                                                      True]
    store.put({"id": "resp_old", "created_at": now - 1000}, [], [])
    assert store.get("resp_old") is None  # past the age limit: dropped at once
    assert store.delete("resp_4") and not store.delete("resp_4")
    store.close()
    reopened = ResponseStore(tmp_path / "store", max_responses=3, max_age_s=100)
    found = reopened.get("resp_3")
    assert found is not None and found.input_items == [{"id": "m3"}]
    assert ResponseStore(tmp_path / "store", max_age_s=1).get("resp_3") is None  # expired
    with pytest.raises(ValueError, match="responses_store_max"):
        ResponseStore(tmp_path, max_responses=0)


def test_an_empty_answer_is_an_empty_message(served: Any) -> None:
    client = sdk(served)
    out = client.responses.create(model="scripted-model", input="[empty]")
    assert [o.type for o in out.output] == ["message"] and out.output_text == ""
    with client.responses.stream(model="scripted-model", input="[empty] streamed") as stream:
        kinds = [e.type for e in stream]
        assert stream.get_final_response().output_text == ""
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done",
                     "response.completed"]


def test_an_unwritable_store_still_answers(kit: SimpleNamespace, tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    running = kit.RunningServer(ResponsesScript(kit.ScriptedEngineClient()),
                                options={"responses_store_dir": str(blocked)})
    try:
        out = sdk(running).responses.create(model="scripted-model", input="still here")
        assert out.output_text == NATURAL
        assert kit.wait_for(lambda: "could not store response" in caplog.text)
    finally:
        running.stop()
