"""Each model family's tool calls through its chat template (``chat_templates/``), on chat,
responses and messages, whole and streamed, with the official SDKs.

The text path is the engine's own: the tokenizer role renders each request with a tiny model's
tokenizer and the family's template and picks the tool-call parser from the template (no
``--tool-call-parser``); the detokenizer role turns the answer's tokens into the deltas the
frontend parses. Only the model is scripted: it says ``TemplateModel.answer``, token by token.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anthropic
import pytest
from openai import OpenAI

from minisgl_core.testing.tiny import make_tiny_model
from minisgl_core.text.detokenize import DetokenizerRole
from minisgl_core.text.tokenize import TokenizerRole
from minisgl_core.wire.schema import (
    GenerateRequest,
    TextDelta,
    TokenBatch,
    TokenDelta,
    TokenizeCall,
    TokenizerReply,
)

TEMPLATES = Path(__file__).parent / "chat_templates"
FAMILIES = ("hermes", "llama3_json", "mistral", "qwen3_coder")
DESCRIPTION = "the weather of a city"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city"]}
ARGS = {"city": "Par\"is 東京", "days": 3}
PLAIN = "It is sunny."
# what a model of each family says to call get_weather(ARGS): its template's own call format
ANSWERS = {
    "hermes": ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": '
               f'{json.dumps(ARGS, ensure_ascii=False)}}}\n</tool_call>'),
    "llama3_json": f'{{"name": "get_weather", "parameters": {json.dumps(ARGS)}}}',
    "mistral": ('Let me check.[TOOL_CALLS] [{"name": "get_weather", "arguments": '
                f'{json.dumps(ARGS)}, "id": "a1b2c3d4e"}}]'),
    "qwen3_coder": ("Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                    f"{ARGS['city']}\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
                    "</function>\n</tool_call>"),
}
# Llama 3's call is the whole answer: it has no words before it
CONTENT = {family: "" if family == "llama3_json" else "Let me check." for family in FAMILIES}
# pieces of how each template writes an earlier call (arguments {"city": "Paris"}) and its result
RENDERED = {
    "hermes": ("<tool_call>\n{", '"name": "get_weather"', '"arguments": {"city": "Paris"}',
               '<tool_response>\n{"name": "get_weather", "content": "sunny, 21 C"}\n'
               "</tool_response>"),
    "llama3_json": ('<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", '
                    '"parameters": {"city": "Paris"}}<|eot_id|>',
                    '<|start_header_id|>ipython<|end_header_id|>\n\n{"output": "sunny, 21 C"}'),
    "mistral": ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "',
                '[TOOL_RESULTS] {"content": ', "sunny, 21 C", '"call_id": "'),
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "</function>\n</tool_call>", "<tool_response>\nsunny, 21 C\n</tool_response>"),
}


class TemplateModel:
    """An EngineClient whose requests go through the real tokenizer and detokenizer roles of a
    tiny model; the model answers ``answer``, one token a step."""

    def __init__(self, model_dir: Path) -> None:
        self.model_name = "tiny-tools"
        self.max_context = 8192
        self.frontend_id = "templates"
        self.tokenizer = TokenizerRole(model_dir, self.max_context)
        self.detokenizer = DetokenizerRole(model_dir)
        self.answer = PLAIN
        self.prompts: list[str] = []  # each generation's prompt as text, special tokens kept
        self.families: list[str | None] = []  # the tool-call format each generation's deltas name

    def healthy(self) -> bool:
        return True

    def metrics(self) -> dict[str, float]:
        return {}

    def plugins(self) -> list[dict[str, Any]]:
        return []

    async def abort(self, request_id: str) -> None:
        """Nothing to stop: each generation runs to its end within ``generate``."""

    async def tokenize(self, request: GenerateRequest, *, add_special_tokens: bool | None = None,
                       add_generation_prompt: bool = True, token_strs: bool = False
                       ) -> TokenizerReply:
        return self.tokenizer.tokenize_call(TokenizeCall(
            "count", self.frontend_id, request, add_special_tokens, add_generation_prompt,
            token_strs))

    async def detokenize(self, token_ids: Sequence[int]) -> TokenizerReply:
        return TokenizerReply("text", text=self.tokenizer.tokenizer.decode(list(token_ids)))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        tokenized = self.tokenizer.tokenize(request)
        rid, prompt = request.request_id, tokenized.prompt_ids
        if tokenized.error is not None:
            yield TextDelta(rid, finish_reason="error", error=tokenized.error)
            return
        hf = self.tokenizer.tokenizer
        self.prompts.append(hf.decode(list(prompt), skip_special_tokens=False))
        ids = hf.encode(self.answer, add_special_tokens=False)
        steps = [TokenDelta(rid, (t,), prompt_tokens=len(prompt), completion_tokens=i + 1,
                            detokenize=tokenized.detokenize if i == 0 else None)
                 for i, t in enumerate(ids)]
        steps.append(TokenDelta(rid, finish_reason="stop", prompt_tokens=len(prompt),
                                completion_tokens=len(ids)))
        for step in steps:
            for delta in self.detokenizer.process(TokenBatch((step,))).get(request.owner, []):
                self.families.append(delta.tool_parser)
                yield delta


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           kit: SimpleNamespace) -> Iterator[SimpleNamespace]:
    """One family's tiny model carrying its chat template, served by the OpenAI frontend."""
    name = request.param
    model = make_tiny_model(tmp_path_factory.mktemp(name) / "tiny", "llama",
                            chat_template=(TEMPLATES / f"{name}.jinja").read_text())
    engine = TemplateModel(model)
    server = kit.RunningServer(engine)
    yield SimpleNamespace(name=name, engine=engine, server=server)
    server.stop()


def openai_sdk(family: SimpleNamespace) -> OpenAI:
    return OpenAI(base_url=family.server.url, api_key="none", max_retries=0, timeout=30)


def anthropic_sdk(family: SimpleNamespace) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=family.server.base, api_key="none", max_retries=0,
                               timeout=30)


def chat_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "get_weather", "description": DESCRIPTION,
                                              "parameters": SCHEMA}}]


def responses_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "name": "get_weather", "description": DESCRIPTION,
             "parameters": SCHEMA}]


def messages_tools() -> list[dict[str, Any]]:
    return [{"name": "get_weather", "description": DESCRIPTION, "input_schema": SCHEMA}]


def test_the_parser_is_picked_from_the_template(family: SimpleNamespace) -> None:
    assert family.engine.tokenizer.tool_parser == family.name
    family.engine.answer, family.engine.families = PLAIN, []
    openai_sdk(family).chat.completions.create(
        model="tiny-tools", messages=[{"role": "user", "content": "hi"}], tools=chat_tools())
    assert set(family.engine.families) == {family.name}  # every delta names the format
    family.engine.families = []
    openai_sdk(family).chat.completions.create(
        model="tiny-tools", messages=[{"role": "user", "content": "hi"}])
    assert set(family.engine.families) == {None}  # a chat without tools names none


def check_rendered(family: SimpleNamespace) -> None:
    """The last prompt holds the tools, the earlier call and its result, the template's way."""
    prompt = family.engine.prompts[-1]
    assert DESCRIPTION in prompt, prompt
    # Mistral's template writes the system prompt only into a conversation's last user turn
    assert ("be brief" in prompt) == (family.name != "mistral"), prompt
    assert all(piece in prompt for piece in RENDERED[family.name]), prompt
    if family.name == "mistral":  # the call's id and the result's are the same 9 characters
        ids = re.findall(r'"(?:id|call_id)": "([^"]*)"', prompt)
        assert len(ids) == 2 and ids[0] == ids[1] and re.fullmatch("[A-Za-z0-9]{9}", ids[0])


def test_a_call_and_its_result_go_through_the_template(family: SimpleNamespace) -> None:
    engine = family.engine
    engine.answer = PLAIN
    call_id, arguments = "call_8f2a9c41d7e3b6", json.dumps({"city": "Paris"})
    chat = openai_sdk(family).chat.completions.create(
        model="tiny-tools", tools=chat_tools(),  # type: ignore[arg-type]
        messages=[{"role": "system", "content": "be brief"},
                  {"role": "user", "content": "weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": call_id, "type": "function",
                       "function": {"name": "get_weather", "arguments": arguments}}]},
                  {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21 C"}])
    assert chat.choices[0].message.content == PLAIN
    check_rendered(family)
    response = openai_sdk(family).responses.create(
        model="tiny-tools", instructions="be brief", tools=responses_tools(),  # type: ignore[arg-type]
        input=[{"role": "user", "content": "weather in Paris?"},
               {"type": "function_call", "call_id": call_id, "name": "get_weather",
                "arguments": arguments},
               {"type": "function_call_output", "call_id": call_id, "output": "sunny, 21 C"}])
    assert response.output_text == PLAIN
    check_rendered(family)
    message = anthropic_sdk(family).messages.create(
        model="tiny-tools", max_tokens=64, system="be brief", tools=messages_tools(),  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "weather in Paris?"},
                  {"role": "assistant", "content": [
                      {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9",
                       "name": "get_weather", "input": {"city": "Paris"}}]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                       "content": "sunny, 21 C"}]}])
    assert message.content[0].text == PLAIN  # type: ignore[union-attr]
    check_rendered(family)


def chat_call(family: SimpleNamespace, stream: bool) -> tuple[str, list[tuple[str, Any]]]:
    ask: dict[str, Any] = {"model": "tiny-tools", "tools": chat_tools(),
                           "messages": [{"role": "user", "content": "weather?"}]}
    client = openai_sdk(family)
    if not stream:
        choice = client.chat.completions.create(**ask).choices[0]
        assert choice.finish_reason == "tool_calls"
        return choice.message.content or "", [
            (c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls or []]  # type: ignore[union-attr]
    content, calls, reason = "", [], None
    for chunk in client.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reason = choice.finish_reason or reason
            for d in choice.delta.tool_calls or []:
                if d.id is not None:
                    calls.append([d.function.name, ""])  # type: ignore[union-attr]
                calls[d.index][1] += d.function.arguments or ""  # type: ignore[union-attr]
    assert reason == "tool_calls"
    return content, [(name, json.loads(arguments)) for name, arguments in calls]


def responses_call(family: SimpleNamespace, stream: bool) -> tuple[str, list[tuple[str, Any]]]:
    ask: dict[str, Any] = {"model": "tiny-tools", "tools": responses_tools(), "input": "weather?"}
    client = openai_sdk(family)
    if stream:
        with client.responses.stream(**ask) as events:
            kinds = {e.type for e in events}
            response = events.get_final_response()
        assert "response.function_call_arguments.delta" in kinds
    else:
        response = client.responses.create(**ask)
    assert response.status == "completed"
    return response.output_text, [(o.name, json.loads(o.arguments)) for o in response.output
                                  if o.type == "function_call"]


def messages_call(family: SimpleNamespace, stream: bool) -> tuple[str, list[tuple[str, Any]]]:
    ask: dict[str, Any] = {"model": "tiny-tools", "max_tokens": 256, "tools": messages_tools(),
                           "messages": [{"role": "user", "content": "weather?"}]}
    client = anthropic_sdk(family)
    if stream:
        with client.messages.stream(**ask) as events:
            kinds = {e.delta.type for e in events if e.type == "content_block_delta"}
            message = events.get_final_message()
        assert "input_json_delta" in kinds
    else:
        message = client.messages.create(**ask)
    assert message.stop_reason == "tool_use"
    text = "".join(b.text for b in message.content if b.type == "text")
    return text, [(b.name, b.input) for b in message.content if b.type == "tool_use"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", [chat_call, responses_call, messages_call],
                         ids=["chat", "responses", "messages"])
def test_the_familys_call_comes_back_structured(family: SimpleNamespace, api: Any,
                                                stream: bool) -> None:
    family.engine.answer = ANSWERS[family.name]
    content, calls = api(family, stream)
    assert calls == [("get_weather", ARGS)]
    assert content == CONTENT[family.name]
