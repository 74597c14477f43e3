"""/v1/messages end to end with the ``anthropic`` SDK: `minisgl launch` with the synthetic
scheduler (it echoes the prompt) and a template that writes the last message alone, so what a
turn says is what the model answers, through the real tokenizer, reasoning parser, tool-call
parser (the template names Qwen3-Coder's format), grammar, stop strings and detokenizer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service
from minisgl_core.testing.tiny import make_tiny_model

# the comment names Qwen3-Coder's call format, which the tool-call parser is picked by
ECHO_TEMPLATE = "{#- calls: <function=NAME> -#}{{ messages[-1]['content'] }}<|im_end|>"
WEATHER = {"name": "get_weather", "description": "the weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"},
                                                             "days": {"type": "integer"}},
                            "required": ["city"]}}
XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    model = make_tiny_model(tmp_path_factory.mktemp("echo") / "tiny-echo", "llama",
                            chat_template=ECHO_TEMPLATE)
    # 200 tokens a second: a long answer lasts long enough to hang up in the middle of it
    svc = launch_service(str(model), log_dir=tmp_path_factory.mktemp("logs"),
                         args=["--scheduler", "synthetic", "--reasoning-parser", "qwen3",
                               "--max-seq-len-override", "512",
                               "-s", "roles.scheduler.synthetic.tokens_per_s=200"])
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def sdk(svc: RunningService) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=svc.url, api_key="none", max_retries=0, timeout=60)


def turn(svc: RunningService, content: Any, **extra: Any) -> dict[str, Any]:
    return {"model": svc.model_name(), "max_tokens": 200,
            "messages": [{"role": "user", "content": content}], **extra}


def test_thinking_comes_as_thinking_blocks(service: RunningService) -> None:
    client = sdk(service)
    ask = turn(service, "<think>a plan</think>the answer",
               thinking={"type": "enabled", "budget_tokens": 1024})
    message = client.messages.create(**ask)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "a plan"  # type: ignore[union-attr]
    assert message.content[1].text == "the answer"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    with client.messages.stream(**ask) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "thinking_delta" in deltas and "text_delta" in deltas
    assert deltas.index("text_delta") > deltas.index("thinking_delta")
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "a plan"  # type: ignore[union-attr]
    assert final.usage.input_tokens == message.usage.input_tokens > 0
    assert final.usage.output_tokens == message.usage.output_tokens


THOUGHT = " ".join(f"step{i}" for i in range(16))


def test_thinking_stops_at_its_budget(service: RunningService) -> None:
    """Past budget_tokens the thinking is cut, its request aborted, and the answer continues
    from the thinking closed: the echo of the same prompt, by a second engine request."""
    client = sdk(service)
    content = f"<think>{THOUGHT}</think>the answer"
    ask = turn(service, content, thinking={"type": "enabled", "budget_tokens": 8})
    message = client.messages.create(**ask)
    assert [b.type for b in message.content] == ["thinking", "text"]
    thought = message.content[0].thinking  # type: ignore[union-attr]
    assert thought and THOUGHT.startswith(thought) and len(thought) < len(THOUGHT) // 2
    assert message.content[1].text == content  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    with client.messages.stream(**ask) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas.index("text_delta") > deltas.index("thinking_delta")
    assert final.content[0].thinking == thought  # type: ignore[union-attr]
    assert final.usage.output_tokens == message.usage.output_tokens > len(content.split())
    # nothing of the cut thoughts' requests runs on: every page is back
    service.wait_metrics(lambda m: m["minisgl_requests_running"] == 0
                         and m["minisgl_kv_pages_free"] == m["minisgl_kv_pages_total"],
                         what="every page free")
    # no room left for an answer under max_tokens: it ends with the thinking
    short = client.messages.create(**{**ask, "max_tokens": 10})
    assert [b.type for b in short.content] == ["thinking"]
    assert short.stop_reason == "max_tokens"
    # a budget the thinking stays under changes nothing
    whole = client.messages.create(**turn(service, content, thinking={
        "type": "enabled", "budget_tokens": 150}))
    assert whole.content[0].thinking == THOUGHT  # type: ignore[union-attr]
    assert whole.content[1].text == "the answer"  # type: ignore[union-attr]


def test_a_stop_sequence_ends_the_answer(service: RunningService) -> None:
    client = sdk(service)
    ask = turn(service, "one two three four", stop_sequences=["three", "nine"])
    message = client.messages.create(**ask)
    assert message.content[0].text == "one two "  # type: ignore[union-attr]
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "three"
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "three"
    plain = client.messages.create(**turn(service, "one two", stop_sequences=["nine"]))
    assert plain.stop_reason == "end_turn" and plain.stop_sequence is None
    short = client.messages.create(**{**turn(service, "word " * 40), "max_tokens": 5})
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 5


def test_a_call_in_the_models_own_format(service: RunningService) -> None:
    client = sdk(service)
    ask = turn(service, f"Let me look.\n{XML_CALL}", tools=[WEATHER])
    message = client.messages.create(**ask)
    assert [b.type for b in message.content] == ["text", "tool_use"]
    call = message.content[1]
    assert call.type == "tool_use" and call.id.startswith("toolu_")
    assert (call.name, call.input) == ("get_weather", {"city": "Paris", "days": 3})
    assert message.stop_reason == "tool_use"
    with client.messages.stream(**ask) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "input_json_delta" in kinds
    assert final.content[1].input == {"city": "Paris", "days": 3}  # type: ignore[union-attr]
    # the chat route reads the same format
    chat = httpx.post(f"{service.url}/v1/chat/completions", timeout=60, json={
        "model": service.model_name(), "max_tokens": 200,
        "messages": [{"role": "user", "content": XML_CALL}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
                                                     "parameters": WEATHER["input_schema"]}}]})
    choice = chat.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris", "days": 3}


def test_a_forced_call_then_its_result(service: RunningService) -> None:
    client = sdk(service)
    forced = client.messages.create(**turn(
        service, '{"city": "Lyon"}', tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"}))
    assert forced.stop_reason == "tool_use"
    call = forced.content[-1]
    assert call.type == "tool_use" and call.input == {"city": "Lyon"}
    follow = client.messages.create(
        model=service.model_name(), max_tokens=200, tools=[WEATHER],
        messages=[{"role": "user", "content": "weather in Lyon?"},
                  {"role": "assistant", "content": [c.model_dump() for c in forced.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "sunny, 21 C"}]}])
    # the echo is the last turn: the tool's result, as the prompt gave it to the model
    assert follow.stop_reason == "end_turn"
    assert "sunny, 21 C" in follow.content[0].text  # type: ignore[union-attr]


def test_any_tool_is_a_grammar_made_call(service: RunningService) -> None:
    answer = '[{"name": "get_weather", "arguments": {"city": "Rome"}}]'
    ask = turn(service, answer, tools=[WEATHER],
               tool_choice={"type": "any", "disable_parallel_tool_use": True})
    message = sdk(service).messages.create(**ask)
    assert message.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in message.content] == [
        ("tool_use", {"city": "Rome"})]
    with sdk(service).messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert final.content[0].input == {"city": "Rome"}  # type: ignore[union-attr]


def test_count_tokens_is_the_prompts_length(service: RunningService) -> None:
    messages = [{"role": "user", "content": "count me, please"}]
    counted = sdk(service).messages.count_tokens(model=service.model_name(), messages=messages)
    tokenized = httpx.post(f"{service.url}/tokenize", timeout=60,
                           json={"model": service.model_name(), "messages": messages}).json()
    assert counted.input_tokens == tokenized["count"] > 0


def test_a_disconnect_mid_stream_frees_the_pages(service: RunningService) -> None:
    aborted = 'minisgl_requests_finished_total{reason="abort"}'
    before = service.metrics()[aborted]
    with httpx.stream("POST", f"{service.url}/v1/messages", timeout=60,
                      json=turn(service, "word " * 100, stream=True)) as resp:
        assert resp.status_code == 200, resp.read()
        deltas = 0
        for line in resp.iter_lines():  # hang up a few tokens in (the answer takes ~1 s)
            deltas += line == "event: content_block_delta"
            if deltas == 3:
                break
    service.wait_metrics(lambda m: m[aborted] == before + 1
                         and m["minisgl_kv_pages_free"] == m["minisgl_kv_pages_total"]
                         and m["minisgl_requests_running"] == 0
                         and m["minisgl_frontend_requests_inflight"] == 0,
                         what="the stream aborted and every page free")
