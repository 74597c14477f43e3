"""Sampling: seeds reproduce whatever the batch, filters keep only what they should, penalties."""

from __future__ import annotations

import random

import pytest
import torch

from minisgl_core.engine.request import Request
from minisgl_core.engine.sampler import Sampler
from minisgl_core.wire.schema import SamplingParams

SEEDED = SamplingParams(max_tokens=24, temperature=1.5, top_p=0.95, seed=1234, ignore_eos=True)


def _run_with_company(make_engine, drain, tokens_of, company: int, seed: int) -> list[int]:
    engine = make_engine("qwen2", page_size=4, max_prefill_tokens=16)
    rng = random.Random(seed)

    def other(i: int) -> None:
        sp = SamplingParams(max_tokens=rng.randrange(1, 30), temperature=rng.choice([0.0, 1.0]),
                            seed=rng.choice([None, 99]), top_k=rng.choice([0, 3]))
        engine.add_request(f"o{i}", [rng.randrange(3, 300) for _ in range(rng.randrange(1, 40))],
                           sp)

    for i in range(company):
        other(i)
    engine.add_request("x", [11, 12, 13, 14, 15], SEEDED)
    first = [t for o in engine.step() if o.request_id == "x" for t in o.token_ids]
    for i in range(company, 2 * company):  # more arrive while x is running
        other(i)
    return first + tokens_of(drain(engine)["x"])


def test_seeded_request_is_reproducible_across_batch_compositions(make_engine, drain,
                                                                  tokens_of) -> None:
    alone = _run_with_company(make_engine, drain, tokens_of, company=0, seed=0)
    crowded = _run_with_company(make_engine, drain, tokens_of, company=5, seed=1)
    other_crowd = _run_with_company(make_engine, drain, tokens_of, company=3, seed=2)
    assert alone == crowded == other_crowd
    assert len(alone) == 24


def test_different_seeds_give_different_samples(make_engine, drain, tokens_of) -> None:
    engine = make_engine("qwen2")
    for s in range(4):
        engine.add_request(str(s), [11, 12, 13, 14, 15],
                           SamplingParams(max_tokens=24, temperature=1.5, seed=s,
                                          ignore_eos=True))
    outs = drain(engine)
    assert len({tuple(tokens_of(outs[str(s)])) for s in range(4)}) > 1


def _req(**kw: object) -> Request:
    prompt = kw.pop("prompt", [0])
    return Request("r", list(prompt), SamplingParams(**kw), max_tokens=16)  # type: ignore[arg-type]


def _draws(logits: list[float], n: int = 400, **kw: object) -> list[int]:
    sampler = Sampler(len(logits), "cpu", seed=0)
    reqs = [_req(**kw) for _ in range(n)]
    for r in reqs:
        sampler.prepare(r)
    return sampler.sample(torch.tensor([logits] * n), reqs)


LOGITS = [2.0, 1.9, 1.8, 1.0, 0.5, -1.0]  # softmax: 0.30 0.27 0.25 0.11 0.07 0.01


def test_filters_keep_only_allowed_tokens() -> None:
    assert set(_draws(LOGITS, temperature=1.0)) >= {0, 1, 2, 3}
    assert set(_draws(LOGITS, temperature=1.0, top_k=2)) == {0, 1}
    assert set(_draws(LOGITS, temperature=1.0, top_p=0.5)) == {0, 1}  # 0.30 < 0.5 <= 0.57
    assert set(_draws(LOGITS, temperature=1.0, min_p=0.85)) == {0, 1}  # 0.27/0.30 >= 0.85
    assert set(_draws(LOGITS, temperature=0.0)) == {0}
    assert set(_draws(LOGITS, temperature=5.0, top_k=1)) == {0}


def test_sampling_follows_the_softmax() -> None:
    draws = _draws(LOGITS, n=4000, temperature=1.0)
    probs = torch.tensor(LOGITS).softmax(-1)
    freq = torch.bincount(torch.tensor(draws), minlength=len(LOGITS)).float() / len(draws)
    assert (freq - probs).abs().max() < 0.03


def _pick(logits: list[float], output: list[int], **kw: object) -> int:
    sampler = Sampler(len(logits), "cpu")
    r = _req(temperature=0.0, **kw)
    sampler.prepare(r)
    for t in output:
        r.output_ids.append(t)
        sampler.observe(r, t)
    return sampler.sample(torch.tensor([logits]), [r])[0]


def test_presence_and_frequency_penalties_follow_openai() -> None:
    logits = [5.0, 4.5, 0.0]
    assert _pick(logits, [0]) == 0
    assert _pick(logits, [0], presence_penalty=0.6) == 1  # 5 - 0.6 < 4.5
    assert _pick(logits, [0], presence_penalty=0.4) == 0  # 5 - 0.4 > 4.5
    assert _pick(logits, [0], frequency_penalty=0.3) == 0  # 5 - 0.3 > 4.5
    assert _pick(logits, [0, 0], frequency_penalty=0.3) == 1  # 5 - 0.6 < 4.5
    assert _pick(logits, [1], presence_penalty=2.0) == 0  # only generated tokens count
    assert _pick([5.0, 4.5], [], presence_penalty=2.0, prompt=[0]) == 0  # prompt does not count


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    assert _pick([2.0, 1.5], [], repetition_penalty=1.5, prompt=[0]) == 1  # 2/1.5 < 1.5
    assert _pick([2.0, 1.5], [], repetition_penalty=1.2, prompt=[0]) == 0  # 2/1.2 > 1.5
    assert _pick([-1.0, -1.2], [], repetition_penalty=1.5, prompt=[0]) == 1  # -1.5 < -1.2
    assert _pick([2.0, 1.5, 0.0], [0], repetition_penalty=1.5, prompt=[2]) == 1  # outputs too
    assert _pick([2.0, 1.5], [0], repetition_penalty=1.5, prompt=[1, 0]) == 0  # both penalized


@pytest.mark.parametrize("penalty", [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0},
                                     {"repetition_penalty": 2.0}])
def test_penalties_change_generation_where_a_token_repeats(make_engine, drain, tokens_of,
                                                          penalty) -> None:
    engine = make_engine("llama")
    prompt = [20, 21, 22]
    base = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    engine.add_request("plain", prompt, base)
    engine.add_request("pen", prompt, SamplingParams(**{**_fields(base), **penalty}))
    outs = drain(engine)
    plain, pen = tokens_of(outs["plain"]), tokens_of(outs["pen"])
    assert plain != pen
    # the first difference is where greedy wanted a token the penalty applies to
    i = next(i for i, (a, b) in enumerate(zip(plain, pen, strict=True)) if a != b)
    seen = plain[:i] + (prompt if "repetition_penalty" in penalty else [])
    assert plain[i] in seen and pen[i] != plain[i]
    if "presence_penalty" not in penalty:  # these grow with every repeat
        assert max(map(pen.count, pen)) < max(map(plain.count, plain))


def _fields(sp: SamplingParams) -> dict[str, object]:
    return {f: getattr(sp, f) for f in sp.__struct_fields__}


def test_logit_bias_is_added_before_sampling() -> None:
    logits = [5.0, 4.5, 0.0]
    assert _pick(logits, [], logit_bias=((1, 0.6),)) == 1  # 4.5 + 0.6 > 5
    assert _pick(logits, [], logit_bias=((1, 0.4),)) == 0
    assert _pick(logits, [], logit_bias=((0, -100.0), (1, -100.0))) == 2
    assert _pick(logits, [0], logit_bias=((2, 0.3),), presence_penalty=0.6) == 1  # both apply


def test_min_tokens_masks_eos_and_stop_token_ids_until_reached() -> None:
    sampler = Sampler(4, "cpu", eos_token_ids=[0])
    r = _req(temperature=0.0, min_tokens=2, stop_token_ids=(1,))
    sampler.prepare(r)
    logits = torch.tensor([[9.0, 8.0, 1.0, 0.0]])  # EOS first, the stop token next
    assert sampler.sample(logits.clone(), [r]) == [2]
    r.output_ids.append(2)
    assert sampler.sample(logits.clone(), [r]) == [2]
    r.output_ids.append(2)  # min_tokens reached: EOS may come now
    assert sampler.sample(logits.clone(), [r]) == [0]
    ignoring = _req(temperature=0.0, min_tokens=2, ignore_eos=True)
    sampler.prepare(ignoring)  # EOS does not stop it, so it is not masked
    assert ignoring.banned is None and sampler.sample(logits.clone(), [ignoring]) == [0]


def test_min_tokens_and_logit_bias_steer_the_engine(make_engine, drain, tokens_of) -> None:
    engine = make_engine("llama")
    prompt = [20, 21, 22]
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    engine.add_request("plain", prompt, greedy)
    plain = tokens_of(drain(engine)["plain"])
    first = plain[0]
    # the first greedy token as a stop token: alone it ends the request at once ...
    engine.add_request("stop", prompt, SamplingParams(**{**_fields(greedy),
                                                         "stop_token_ids": (first,)}))
    # ... with min_tokens it cannot come before 5 tokens exist
    engine.add_request("min", prompt, SamplingParams(**{**_fields(greedy), "min_tokens": 5,
                                                        "stop_token_ids": (first,)}))
    forced = plain[-1] + 1
    engine.add_request("bias", prompt, SamplingParams(**{**_fields(greedy),
                                                         "logit_bias": ((forced, 100.0),)}))
    outs = drain(engine)
    assert tokens_of(outs["stop"]) == [first] and outs["stop"][-1].finish_reason == "stop"
    held = tokens_of(outs["min"])
    assert len(held) >= 5 and first not in held[:5]
    assert held[-1] == first or len(held) == 12
    assert tokens_of(outs["bias"]) == [forced] * 12


def test_logit_bias_outside_the_vocabulary_is_rejected(make_engine) -> None:
    from minisgl_core.rejection import RequestRejected

    engine = make_engine("llama")
    with pytest.raises(RequestRejected, match="logit_bias token id 99999 is outside"):
        engine.add_request("x", [1, 2], SamplingParams(logit_bias=((99999, 1.0),)))
    assert not engine.has_work()
