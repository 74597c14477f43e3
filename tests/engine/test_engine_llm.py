"""The offline LLM API on a tiny model: prompt kinds, order, per-prompt sampling, chat."""

from __future__ import annotations

import pytest

from minisgl_core import LLM, SamplingParams
from minisgl_core.offline import cut_at_stop
from minisgl_core.rejection import RequestRejected

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_models) -> LLM:
    return LLM(str(tiny_models["llama"]), page_size=4, num_threads=1)


def test_generate_keeps_prompt_order_for_text_and_token_prompts(llm) -> None:
    tok = llm.tokenizer
    prompts = ["Hello world", tok.encode("你好"), "The quick brown fox jumps over the lazy dog"]
    outs = llm.generate(prompts, GREEDY)
    assert [o.prompt_token_ids for o in outs] == [tok.encode("Hello world"), tok.encode("你好"),
                                                  tok.encode(prompts[2])]
    for o in outs:
        assert len(o.token_ids) == 8 and o.finish_reason == "length"
        assert o.text == tok.decode(o.token_ids, skip_special_tokens=True)
    alone = llm.generate(prompts[2], GREEDY)  # one string is one prompt
    assert len(alone) == 1 and alone[0].token_ids == outs[2].token_ids
    by_ids = llm.generate(tok.encode(prompts[2]), GREEDY)  # one id list is one prompt
    assert by_ids[0].token_ids == outs[2].token_ids and by_ids[0].prompt is None


def test_one_sampling_params_per_prompt(llm) -> None:
    outs = llm.generate(["a b c", "a b c"], [SamplingParams(max_tokens=3, temperature=0.0),
                                             SamplingParams(max_tokens=5, temperature=0.0)])
    assert [len(o.token_ids) for o in outs] == [3, 5]
    assert outs[1].token_ids[:3] == outs[0].token_ids
    with pytest.raises(ValueError, match="2 prompts but 1"):
        llm.generate(["a", "b"], [GREEDY])


def test_chat_applies_the_template_once(llm) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    out = llm.chat([messages], GREEDY)[0]
    text = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    assert out.prompt == text
    assert out.prompt_token_ids == llm.tokenizer.encode(text, add_special_tokens=False)


def test_rejected_prompt_raises_and_leaves_the_engine_clean(llm) -> None:
    with pytest.raises(RequestRejected) as info:
        llm.generate(["fine", "x " * 600], GREEDY)
    assert info.value.code == "context_length_exceeded"
    llm.engine.check_idle_invariant()


def test_cut_at_stop_uses_the_earliest_match() -> None:
    assert cut_at_stop("one two three", ("three", "two")) == "one "
    assert cut_at_stop("abc", ("x",)) == "abc"


def test_stream_chat_streams_what_chat_answers(llm) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    whole = llm.chat([messages], GREEDY)[0]
    chunks = list(llm.stream_chat(messages, GREEDY))
    assert "".join(c.text for c in chunks) == whole.text
    assert len(chunks) > 1 and all(c.finish_reason is None for c in chunks[:-1])
    assert (chunks[-1].finish_reason, chunks[-1].completion_tokens) == ("length", 8)
    llm.engine.check_idle_invariant()


def test_stream_chat_cuts_at_a_stop_string_and_aborts_when_closed(llm) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    whole = llm.chat([messages], GREEDY)[0].text
    stop = whole[len(whole) // 2:][:3]  # three characters from the middle of the answer
    sampling = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, stop=(stop,))
    chunks = list(llm.stream_chat(messages, sampling))
    assert "".join(c.text for c in chunks) == cut_at_stop(whole, (stop,))
    assert chunks[-1].finish_reason == "stop"
    stream = llm.stream_chat(messages, GREEDY)
    next(stream)
    stream.close()  # the request is aborted, its pages freed
    assert not llm.engine.has_work()
    llm.engine.check_idle_invariant()
