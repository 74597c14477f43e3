"""--reasoning-parser through the real roles: the tokenizer reads the prompt's block and renders
chat_template_kwargs, the detokenizer splits the text, the engine's grammar waits for the block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minisgl_core.testing.tiny import THINKING_CHAT_TEMPLATE, make_tiny_model
from minisgl_core.text.detokenize import DetokenizerRole
from minisgl_core.text.tokenize import TokenizerRole
from minisgl_core.wire.schema import (
    ChatMessage,
    GenerateRequest,
    SamplingParams,
    StructuredOutput,
    TokenBatch,
    TokenDelta,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("thinking") / "tiny", "qwen3",
                           chat_template=THINKING_CHAT_TEMPLATE)


def chat(text: str, kwargs: dict[str, object] | None = None, **sampling: object
         ) -> GenerateRequest:
    return GenerateRequest(request_id="r", owner="fe", sampling=SamplingParams(**sampling),
                           messages=(ChatMessage("user", text),),
                           chat_template_kwargs=json.dumps(kwargs) if kwargs else None)


def test_chat_template_kwargs_reach_the_template(model_dir: Path) -> None:
    role = TokenizerRole(model_dir, 256)
    decode = role.tokenizer.decode
    on = decode(list(role.tokenize(chat("hi")).prompt_ids))
    off = decode(list(role.tokenize(chat("hi", {"enable_thinking": False})).prompt_ids))
    assert on.endswith("<|im_start|>assistant\n")
    assert off == on + "<think>\n\n</think>\n\n"
    assert role.encode(chat("hi", {"enable_thinking": False})) == \
        role.tokenize(chat("hi", {"enable_thinking": False})).prompt_ids  # what /tokenize shows
    for bad, why in ((["x"], "must be an object"), ({"tools": []}, "may not set tools")):
        error = role.tokenize(chat("hi", bad)).error  # type: ignore[arg-type]
        assert error is not None and why in error.message
        assert error.param == "chat_template_kwargs"


def test_the_tokenizer_says_where_the_answer_starts(model_dir: Path) -> None:
    schema = StructuredOutput("json")
    role = TokenizerRole(model_dir, 256, reasoning_parser="qwen3")
    end_ids = tuple(role.tokenizer.encode("</think>", add_special_tokens=False))
    thinking = role.tokenize(chat("hi", structured=schema))
    assert thinking.detokenize.reasoning_parser == "qwen3"
    assert not thinking.detokenize.reasoning_open  # Qwen3 opens its block itself
    assert thinking.sampling.structured == StructuredOutput("json", wait_for=end_ids)
    closed = role.tokenize(chat("hi", {"enable_thinking": False}, structured=schema))
    assert closed.sampling.structured == schema  # no block coming: the grammar applies at once
    r1 = TokenizerRole(model_dir, 256, reasoning_parser="deepseek_r1").tokenize(chat("hi"))
    assert r1.detokenize.reasoning_open  # R1 starts reasoning without writing <think>
    plain = role.tokenize(GenerateRequest(request_id="p", owner="fe", sampling=SamplingParams(),
                                          prompt="<think>a</think>b"))
    assert plain.detokenize.reasoning_parser is None  # completions are never split


def test_the_detokenizer_splits_streamed_text(model_dir: Path) -> None:
    role = TokenizerRole(model_dir, 256, reasoning_parser="qwen3")
    info = role.tokenize(chat("hi")).detokenize
    ids = role.tokenizer.encode("<think>\nstep one</think>\n\nthe answer", add_special_tokens=False)
    detok = DetokenizerRole(model_dir)
    deltas = []
    for i, token in enumerate(ids):
        first = i == 0
        batch = TokenBatch((TokenDelta("r", (token,), detokenize=info if first else None),))
        deltas += detok.process(batch).get("fe", [])
    deltas += detok.process(TokenBatch((TokenDelta("r", (), finish_reason="stop",
                                                   completion_tokens=len(ids)),)))["fe"]
    assert "".join(d.reasoning for d in deltas) == "step one"
    assert "".join(d.text for d in deltas) == "the answer"
    assert [t for d in deltas for t in d.token_ids] == ids  # every id still delivered
    assert detok.active_count() == 0


def test_the_grammar_waits_for_the_end_of_the_reasoning(model_dir: Path) -> None:
    from minisgl_core import LLM

    llm = LLM(str(model_dir), num_threads=1)
    tok = llm.tokenizer
    (forced,) = tok.encode("a", add_special_tokens=False)
    digits = StructuredOutput("regex", r"[0-9]{3}")
    # logit_bias forces token "a" wherever the grammar allows it
    sp = {"max_tokens": 8, "temperature": 0, "logit_bias": ((forced, 100.0),)}
    prompt = tok.encode("hello", add_special_tokens=False)
    (now,) = llm.generate([prompt], SamplingParams(**sp, structured=digits))
    assert len(tok.decode(now.token_ids, skip_special_tokens=True)) == 3
    assert tok.decode(now.token_ids, skip_special_tokens=True).isdigit()
    waiting = StructuredOutput("regex", r"[0-9]{3}", wait_for=(forced, forced))
    (later,) = llm.generate([prompt], SamplingParams(**sp, structured=waiting))
    assert later.token_ids[:2] == [forced, forced]  # free until the marker, then digits
    assert tok.decode(later.token_ids[2:], skip_special_tokens=True).isdigit()
    assert len(tok.decode(later.token_ids[2:], skip_special_tokens=True)) == 3
