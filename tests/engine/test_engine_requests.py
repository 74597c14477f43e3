"""Admission errors, stop conditions and the one-terminal-output rule."""

from __future__ import annotations

import pytest

from minisgl_core.rejection import RequestRejected
from minisgl_core.wire.schema import SamplingParams


def _reject(engine, prompt, sp=None, rid="r") -> RequestRejected:
    with pytest.raises(RequestRejected) as info:
        engine.add_request(rid, prompt, sp or SamplingParams(max_tokens=4))
    return info.value


def test_rejections_name_the_problem_and_keep_nothing(make_engine) -> None:
    engine = make_engine("llama", max_seq_len_override=64, num_pages=6, page_size=4)
    err = _reject(engine, list(range(3, 53)), SamplingParams(max_tokens=20))
    assert err.code == "context_length_exceeded"
    assert "70" in err.message and "64" in err.message
    err = _reject(engine, list(range(3, 67)), SamplingParams(max_tokens=None))
    assert err.code == "context_length_exceeded" and "64" in err.message
    err = _reject(engine, [5] * 20, SamplingParams(max_tokens=10))  # 29 KV tokens > 6 x 4
    assert err.code == "kv_cache_exceeded" and "6" in err.message
    err = _reject(engine, [5, engine.vocab_size])
    assert err.code == "invalid_token_ids" and str(engine.vocab_size) in err.message
    assert _reject(engine, [5, -1]).code == "invalid_token_ids"
    assert _reject(engine, []).code == "empty_prompt"
    engine.add_request("dup", [5, 6], SamplingParams(max_tokens=2))
    assert _reject(engine, [5], rid="dup").code == "duplicate_request_id"
    assert engine.abort("dup")
    engine.check_idle_invariant()
    assert engine.requests == {}


def test_max_tokens_none_runs_to_the_context_limit(make_engine, drain) -> None:
    engine = make_engine("llama", max_seq_len_override=40)
    engine.add_request("r", list(range(3, 33)), SamplingParams(max_tokens=None, temperature=0,
                                                                ignore_eos=True))
    outs = drain(engine)["r"]
    assert outs[-1].finish_reason == "length"
    assert outs[-1].completion_tokens == 10 and outs[-1].prompt_tokens == 30


def _greedy(engine, drain, tokens_of, prompt, **kw) -> tuple[list[int], str | None]:
    engine.add_request("g", prompt, SamplingParams(max_tokens=16, temperature=0.0, **kw))
    outs = drain(engine)["g"]
    assert [o.finish_reason for o in outs[:-1]] == [None] * (len(outs) - 1)
    return tokens_of(outs), outs[-1].finish_reason


def test_stop_token_ids_eos_and_ignore_eos(make_engine, drain, tokens_of) -> None:
    engine = make_engine("qwen2")
    prompt = [30, 31, 32, 33]
    full, reason = _greedy(engine, drain, tokens_of, prompt, ignore_eos=True)
    assert reason == "length" and len(full) == 16
    cut, reason = _greedy(engine, drain, tokens_of, prompt, stop_token_ids=(full[5],))
    assert reason == "stop" and cut == full[:full.index(full[5]) + 1]
    # the EOS set comes from the tokenizer and generation_config.json (a list there)
    assert engine.eos_token_ids == {0, 2}
    engine.eos_token_ids = frozenset({full[3]})
    cut, reason = _greedy(engine, drain, tokens_of, prompt)
    assert reason == "stop" and cut == full[:full.index(full[3]) + 1]
    kept, reason = _greedy(engine, drain, tokens_of, prompt, ignore_eos=True)
    assert reason == "length" and kept == full


def test_stop_strings_end_the_request(make_engine, drain, tokens_of) -> None:
    engine = make_engine("llama")
    prompt = engine.tokenizer.encode("The capital of France")
    full, _ = _greedy(engine, drain, tokens_of, prompt, ignore_eos=True)
    text = engine.tokenizer.decode(full)
    stop = text[len(text) // 2:len(text) // 2 + 2]
    assert stop.strip(), "pick a visible stop string"
    cut, reason = _greedy(engine, drain, tokens_of, prompt, ignore_eos=True, stop=(stop,))
    assert reason == "stop" and len(cut) < len(full) and cut == full[:len(cut)]
    assert stop in engine.tokenizer.decode(cut)
    assert stop not in engine.tokenizer.decode(cut[:-1])


def test_each_request_finishes_exactly_once(make_engine) -> None:
    engine = make_engine("qwen3")
    for i in range(6):
        engine.add_request(str(i), [10 + i] * (i + 1), SamplingParams(max_tokens=i + 1))
    finished: list[str] = []
    for _ in range(100):
        for out in engine.step():
            assert out.request_id not in finished
            if out.finish_reason:
                finished.append(out.request_id)
    assert sorted(finished) == [str(i) for i in range(6)]
    assert engine.step() == [] and not engine.has_work()
    assert all(not engine.abort(str(i)) for i in range(6))
    engine.check_idle_invariant()
