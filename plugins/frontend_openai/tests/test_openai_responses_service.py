"""/v1/responses end to end: `minisgl launch` with the synthetic scheduler (it echoes the prompt)
and a template that writes the last message alone, so what a turn's input says is what the
model answers, through the real tokenizer, reasoning parser, tool parser, grammar and detokenizer;
tool calls in a family's own format (Qwen3-Coder's here), stored responses under the cache
directory; a disconnect that gives the pages back; a chain served from the real engine's prefix
cache."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from pydantic import BaseModel

from minisgl_core.testing.own_cache import own_cache_dir
from minisgl_core.testing.service import RunningService, launch_service
from minisgl_core.testing.tiny import make_tiny_model

ECHO_TEMPLATE = "{{ messages[-1]['content'] }}<|im_end|>"
WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
# the service is told its model writes Qwen3-Coder's XML calls (--tool-call-parser)
CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return own_cache_dir(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Iterator[RunningService]:
    model = make_tiny_model(tmp_path_factory.mktemp("echo") / "tiny-echo", "llama",
                            chat_template=ECHO_TEMPLATE)
    # 100 tokens a second: a long answer lasts long enough to hang up in the middle of it
    svc = launch_service(str(model), log_dir=tmp_path_factory.mktemp("logs"),
                         env={"MINISGL_CACHE_DIR": str(cache)},
                         args=["--scheduler", "synthetic", "--reasoning-parser", "qwen3",
                               "--tool-call-parser", "qwen3_coder",
                               "--max-seq-len-override", "512",
                               "-s", "roles.scheduler.synthetic.tokens_per_s=100"])
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def sdk(svc: RunningService) -> OpenAI:
    return OpenAI(base_url=f"{svc.url}/v1", api_key="none", max_retries=0, timeout=60)


def test_thinking_is_a_reasoning_item(service: RunningService) -> None:
    client = sdk(service)
    out = client.responses.create(model=service.model_name(), input="<think>a plan</think>b",
                                  reasoning={"effort": "high"})
    assert [o.type for o in out.output] == ["reasoning", "message"]
    thought = out.output[0]
    assert thought.type == "reasoning" and thought.content is not None
    assert thought.content[0].text == "a plan" and out.output_text == "b"
    assert out.usage is not None
    assert 0 < out.usage.output_tokens_details.reasoning_tokens < out.usage.output_tokens
    with client.responses.stream(model=service.model_name(),
                                 input="<think>first, 你好 😀</think>\n\nthe answer") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") \
        == "first, 你好 😀"
    assert final.output_text == "the answer"


def test_a_tool_call_its_result_and_the_store(service: RunningService, cache: Path) -> None:
    client = sdk(service)
    call = client.responses.create(model=service.model_name(), input=CALL,
                                   tools=[WEATHER])  # type: ignore[list-item]
    assert [o.type for o in call.output] == ["function_call"]
    item = call.output[0]
    assert item.type == "function_call" and item.name == "get_weather"
    assert json.loads(item.arguments) == {"city": "Paris"}
    # the next turn is built from the stored chain; this template knows no tools, so the
    # tool's output is a user turn in Hermes' tags, which the template echoes
    result = client.responses.create(
        model=service.model_name(), previous_response_id=call.id, tools=[WEATHER],  # type: ignore
        input=[{"type": "function_call_output", "call_id": item.call_id, "output": "sunny"}])
    assert result.output_text == "<tool_response>\nsunny\n</tool_response>"
    assert result.status == "completed"
    assert (cache / "responses" / "responses.sqlite3").is_file()
    assert client.responses.retrieve(call.id).output[0].type == "function_call"
    with client.responses.stream(model=service.model_name(), input=f"Let me see. {CALL}",
                                 tools=[WEATHER]) as stream:  # type: ignore[list-item]
        events = list(stream)
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert final.output_text == "Let me see."
    arguments = "".join(e.delta for e in events
                        if e.type == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Paris"}


def test_json_schema_output_validates(service: RunningService) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    out = sdk(service).responses.create(
        model=service.model_name(), input='{"city": "Lyon"}',
        text={"format": {"type": "json_schema", "name": "city", "schema": schema}})
    assert json.loads(out.output_text) == {"city": "Lyon"}

    class City(BaseModel):
        city: str

    parsed = sdk(service).responses.parse(model=service.model_name(), text_format=City,
                                          input='{"city": "Nice"}')
    assert parsed.output_parsed == City(city="Nice")


def test_a_disconnect_mid_stream_frees_the_pages(service: RunningService) -> None:
    aborted = 'minisgl_requests_finished_total{reason="abort"}'
    before = service.metrics()[aborted]
    body = {"model": service.model_name(), "input": "word " * 100, "stream": True}
    with httpx.stream("POST", f"{service.url}/v1/responses", json=body, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        deltas = 0
        for line in resp.iter_lines():  # hang up a few tokens in (the answer takes ~2 s)
            deltas += line == "event: response.output_text.delta"
            if deltas == 3:
                break
    service.wait_metrics(lambda m: m[aborted] == before + 1
                         and m["minisgl_kv_pages_free"] == m["minisgl_kv_pages_total"]
                         and m["minisgl_requests_running"] == 0
                         and m["minisgl_frontend_requests_inflight"] == 0,
                         what="the stream aborted and every page free")


@pytest.fixture(scope="module")
def model_service(tmp_path_factory: pytest.TempPathFactory, cache: Path
                  ) -> Iterator[RunningService]:
    """The tiny random Llama on the real engine (its prefix cache), one torch thread."""
    model = make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama")
    svc = launch_service(str(model), log_dir=tmp_path_factory.mktemp("logs"),
                         env={"MINISGL_CACHE_DIR": str(cache)},
                         args=["--dtype", "float32", "--max-seq-len-override", "512",
                               "--num-pages", "128", "--page-size", "16",
                               "-s", "num_threads=1"])
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def test_a_chain_reuses_the_prefix_cache(model_service: RunningService) -> None:
    client = sdk(model_service)
    model = model_service.model_name()
    first = client.responses.create(model=model, max_output_tokens=4,
                                    input="Tell me about the old town of Lyon. " * 8)
    second = client.responses.create(model=model, max_output_tokens=4, input="And Paris?",
                                     previous_response_id=first.id)
    assert first.usage is not None and second.usage is not None
    # the second prompt starts with the first: every full page of it is served from the cache
    page = 16
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens >= \
        first.usage.input_tokens // page * page - page
