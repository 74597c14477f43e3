"""TokenizerRole: prompts, chat messages, token ids; bad input is an error, never a raise."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minisgl_core.text.tokenize import PROMPT_TAIL, TokenizerRole
from minisgl_core.wire.schema import ChatMessage, GenerateRequest, SamplingParams, TokenizedRequest

CONTEXT = 128


@pytest.fixture(scope="module")
def role(tiny_dir) -> TokenizerRole:
    return TokenizerRole(tiny_dir, CONTEXT)


@pytest.fixture(scope="module")
def sp_role(sp_dir) -> TokenizerRole:
    return TokenizerRole(sp_dir, CONTEXT)


def request(sampling: SamplingParams | None = None, **fields) -> GenerateRequest:
    return GenerateRequest(request_id="r", owner="fe", sampling=sampling or SamplingParams(),
                           arrival_time=1.5, **fields)


def ok(out: TokenizedRequest) -> TokenizedRequest:
    assert out.error is None, out.error
    assert out.prompt_ids
    assert out.detokenize.prompt_tail_ids == out.prompt_ids[-PROMPT_TAIL:]
    assert (out.request_id, out.arrival_time, out.detokenize.owner) == ("r", 1.5, "fe")
    return out


def error(out: TokenizedRequest, code: str | None = None):
    assert out.error is not None
    assert out.prompt_ids == ()
    assert out.error.type == "invalid_request_error"
    assert out.error.code == code
    assert out.detokenize.owner == "fe"  # the rejection still reaches its frontend
    assert len(out.error.message) < 300
    return out.error


def test_prompt_text(role) -> None:
    sampling = SamplingParams(stop=("END",), skip_special_tokens=False, max_tokens=5)
    out = ok(role.tokenize(request(sampling, prompt="Hello world! 😀")))
    assert list(out.prompt_ids) == role.tokenizer.encode("Hello world! 😀")
    assert out.detokenize.stop == ("END",)
    assert out.detokenize.skip_special_tokens is False
    assert out.sampling == sampling


def test_chat_messages_use_the_template(role) -> None:
    messages = (ChatMessage("system", "Be brief."), ChatMessage("user", "Hi 你好"),
                ChatMessage("assistant", "Hello"), ChatMessage("tool", "42"),
                ChatMessage("user", "And?"))
    out = ok(role.tokenize(request(messages=messages)))
    text = role.tokenizer.decode(out.prompt_ids)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert "<|im_start|>tool\n42<|im_end|>" in text
    assert text.endswith("<|im_start|>user\nAnd?<|im_end|>\n<|im_start|>assistant\n")


def test_token_ids_pass_through(role) -> None:
    ids = (5, 17, 200, len(role.tokenizer) - 1)
    assert ok(role.tokenize(request(token_ids=ids))).prompt_ids == ids


def test_bos_added_to_prompts_but_not_twice_to_chat(sp_role) -> None:
    tok = sp_role.tokenizer
    prompt = ok(sp_role.tokenize(request(prompt="hello world")))
    assert prompt.prompt_ids[0] == tok.bos_token_id
    chat = ok(sp_role.tokenize(request(messages=(ChatMessage("user", "hello"),))))
    assert list(chat.prompt_ids).count(tok.bos_token_id) == 1


@pytest.mark.parametrize("fields", [{"prompt": ""}, {"messages": ()}, {"token_ids": ()}, {},
                                    {"prompt": "a", "token_ids": (1,)}])
def test_missing_or_empty_input(role, fields) -> None:
    error(role.tokenize(request(**fields)))


def test_unknown_role_is_named_but_not_echoed(role) -> None:
    err = error(role.tokenize(request(messages=(ChatMessage("user", "hi"),
                                                ChatMessage("wizard" * 500, "x")))))
    assert "messages[1]" in err.message and "wizard" in err.message
    assert err.param == "messages[1].role"


def test_template_failure(sp_role) -> None:
    err = error(sp_role.tokenize(request(messages=(ChatMessage("assistant", "I start"),))))
    assert "must start with a user or system message" in err.message


def test_model_without_chat_template(tiny_dir, tmp_path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    tok.chat_template = None
    role = TokenizerRole(tiny_dir, CONTEXT, tokenizer=tok)
    err = error(role.tokenize(request(messages=(ChatMessage("user", "hi"),))))
    assert "no chat template" in err.message
    ok(role.tokenize(request(prompt="hi")))


@pytest.mark.parametrize("bad", [-1, 384, 10**9])
def test_token_ids_outside_the_vocabulary(role, bad: int) -> None:
    assert role.vocab_size == 384
    err = error(role.tokenize(request(token_ids=(1, 2, bad) + (3,) * 1000)))
    assert str(bad) in err.message and "384" in err.message and "position 2" in err.message


def test_vocab_size_from_the_model_config_wins(tiny_dir) -> None:
    role = TokenizerRole(tiny_dir, CONTEXT, vocab_size=400)
    assert ok(role.tokenize(request(token_ids=(399,)))).prompt_ids == (399,)
    error(role.tokenize(request(token_ids=(400,))))


def test_prompt_longer_than_the_context(role) -> None:
    ids = tuple(range(10, 10 + CONTEXT + 6))
    err = error(role.tokenize(request(SamplingParams(max_tokens=None), token_ids=ids)),
                "context_length_exceeded")
    assert f"{CONTEXT} tokens" in err.message and f"{CONTEXT + 6} tokens" in err.message
    # Exactly the context: no room left for even one generated token.
    err = error(role.tokenize(request(SamplingParams(max_tokens=None), token_ids=ids[:CONTEXT])),
                "context_length_exceeded")
    assert str(CONTEXT) in err.message and "no room" in err.message
    long_text = "The capital of France is Paris. " * 40
    err = error(role.tokenize(request(prompt=long_text)), "context_length_exceeded")
    assert long_text[:40] not in err.message


def test_prompt_plus_max_tokens_beyond_the_context(role) -> None:
    ids = tuple(range(10, 50))  # 40 tokens
    err = error(role.tokenize(request(SamplingParams(max_tokens=100), token_ids=ids)),
                "context_length_exceeded")
    assert "140 tokens" in err.message and "40 in the prompt" in err.message
    assert "100 in the completion" in err.message and f"{CONTEXT} tokens" in err.message
    assert err.param == "max_tokens"
    ok(role.tokenize(request(SamplingParams(max_tokens=CONTEXT - 40), token_ids=ids)))
    ok(role.tokenize(request(SamplingParams(max_tokens=None), token_ids=ids)))


def test_eos_ids_include_generation_config(role) -> None:
    tok = role.tokenizer
    assert role.eos_token_ids == {tok.convert_tokens_to_ids("<|im_end|>"),
                                  tok.convert_tokens_to_ids("<|endoftext|>")}


def test_smollm2_chat_prompt(smollm2_dir) -> None:
    role = TokenizerRole(smollm2_dir, 2048)
    out = ok(role.tokenize(request(messages=(ChatMessage("user", "What is 2+2?"),))))
    text = role.tokenizer.decode(out.prompt_ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert role.tokenizer.decode(out.detokenize.prompt_tail_ids).endswith("assistant\n")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=st.one_of(st.none(), st.text(max_size=300)),
       roles=st.one_of(st.none(), st.lists(st.sampled_from(["user", "system", "assistant",
                                                             "tool", "", "x"]), max_size=4)),
       ids=st.one_of(st.none(), st.lists(st.integers(-5, 500), max_size=80)),
       max_tokens=st.one_of(st.none(), st.integers(1, 200)))
def test_never_raises(role, prompt, roles, ids, max_tokens) -> None:
    messages = None if roles is None else tuple(ChatMessage(r, "hi") for r in roles)
    out = role.tokenize(request(SamplingParams(max_tokens=max_tokens), prompt=prompt,
                                messages=messages, token_ids=None if ids is None else tuple(ids)))
    assert (out.error is None) == bool(out.prompt_ids)
    if out.error is None:
        assert len(out.prompt_ids) < CONTEXT
        assert max_tokens is None or len(out.prompt_ids) + max_tokens <= CONTEXT
