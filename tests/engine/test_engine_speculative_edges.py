"""N-gram speculation at its edges: an abort, a stop string and max_tokens inside an accepted
draft give plain decoding's tokens, sampled tokens keep their law at every drafted position, and
constrained requests decode plainly next to drafts."""

from __future__ import annotations

import json

from minisgl_core.wire.schema import SamplingParams, StructuredOutput

REPEATING = [5, 6, 7, 8, 9, 10, 11, 12] * 4
NON_REPEATING = list(range(40, 72))
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                           "n": {"type": "integer", "maximum": 99}},
          "required": ["ok", "n"], "additionalProperties": False}


def _greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, ignore_eos=True, **{"max_tokens": 40, **kw})


def _spec(make_engine):
    return make_engine("llama", page_size=4, speculative="ngram", num_speculative_tokens=6)


def _one(engine, drain, prompt, sp):
    engine.add_request("r", prompt, sp)
    outs = drain(engine)["r"]
    engine.check_idle_invariant()
    return outs


def test_abort_inside_a_draft_leaves_the_others_token_for_token(make_engine, drain,
                                                                  tokens_of) -> None:
    prompts = {"a": REPEATING, "b": REPEATING[3:], "c": NON_REPEATING}
    plain_engine = make_engine("llama", page_size=4)
    for rid, p in prompts.items():
        plain_engine.add_request(rid, p, _greedy(max_tokens=60))
    plain = {rid: tokens_of(o) for rid, o in drain(plain_engine).items()}
    engine = _spec(make_engine)
    for rid, p in prompts.items():
        engine.add_request(rid, p, _greedy(max_tokens=60))
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    for _ in range(200):  # bounded: "a" takes a multi-token step within a few steps
        outs = engine.step()
        for o in outs:
            got[o.request_id].extend(o.token_ids)
        if any(o.request_id == "a" and len(o.token_ids) > 1 for o in outs):
            break
    else:
        raise AssertionError("request a never accepted a draft")
    assert engine.abort("a")  # right after an accepted draft, its next draft planned or not
    for rid, o in drain(engine).items():
        got[rid].extend(tokens_of(o))
    engine.check_idle_invariant()
    assert got["a"] == plain["a"][:len(got["a"])] and len(got["a"]) < 60
    assert got["b"] == plain["b"] and got["c"] == plain["c"]


def test_max_tokens_ends_inside_an_accepted_draft(make_engine, drain, tokens_of) -> None:
    full = tokens_of(_one(make_engine("llama", page_size=4), drain, REPEATING, _greedy()))
    engine = _spec(make_engine)
    inside = 0
    for n in range(3, 20):
        outs = _one(engine, drain, REPEATING, _greedy(max_tokens=n))
        assert tokens_of(outs) == full[:n] and outs[-1].finish_reason == "length"
        assert outs[-1].completion_tokens == n
        inside += len(outs[-1].token_ids) > 1  # the step that reached n took several tokens
    assert inside >= 3, "max_tokens never fell inside an accepted draft"


def test_stop_string_ends_inside_an_accepted_draft(make_engine, drain, tokens_of) -> None:
    plain_engine = make_engine("llama", page_size=4)
    full = tokens_of(_one(plain_engine, drain, REPEATING, _greedy()))
    engine = _spec(make_engine)
    inside = 0
    for end in range(5, 30, 3):
        stop = plain_engine.tokenizer.decode(full[:end])  # first seen at token ``end``
        plain = _one(plain_engine, drain, REPEATING, _greedy(stop=(stop,)))
        spec = _one(engine, drain, REPEATING, _greedy(stop=(stop,)))
        assert tokens_of(spec) == tokens_of(plain), stop
        assert spec[-1].finish_reason == plain[-1].finish_reason == "stop"
        # tokens of the step after the stop string were dropped, or the step ended on it
        inside += len(spec[-1].token_ids) > 1
    assert inside >= 2, "no stop string fell inside an accepted draft"


def test_constrained_requests_decode_plainly_next_to_drafts(make_engine, drain,
                                                            tokens_of) -> None:
    # a grammar request never drafts (docs/speculative.md: the grammar would have to mask
    # every verified position); it gets plain decoding's tokens while another one speculates
    structured = StructuredOutput("json_schema", json.dumps(SCHEMA))
    sp = SamplingParams(max_tokens=60, temperature=0.0, structured=structured)
    outs = []
    for spec in (None, "ngram"):
        engine = make_engine("llama", page_size=4, speculative=spec)
        engine.add_request("json", REPEATING, sp)  # a prompt that would draft
        engine.add_request("free", REPEATING, _greedy())
        outs.append({rid: tokens_of(o) for rid, o in drain(engine).items()})
        engine.check_idle_invariant()
    assert outs[0] == outs[1]
    text = engine.tokenizer.decode(outs[1]["json"], skip_special_tokens=True)
    assert set(json.loads(text)) == {"ok", "n"}
    alone = make_engine("llama", page_size=4, speculative="ngram")
    _one(alone, drain, REPEATING, sp)
    assert alone.stats().spec_draft_tokens == 0
    assert engine.stats().spec_accepted_tokens > 0  # "free" did speculate beside it


def test_sampled_tokens_keep_every_positions_distribution(make_engine, drain,
                                                          tokens_of) -> None:
    # each of output positions 1..5 (drafted ones, and the target's own token after accepted
    # drafts) has the same marginal law with and without speculation. 400 seeded requests per
    # engine at temperature 2; per position the plain engine's 3 commonest tokens and "any
    # other" (the tail's singletons would dominate the noise); total variation under 0.1 at
    # each (equal laws show 0.05-0.07 here; accepting every draft shows 0.5)
    params = [SamplingParams(max_tokens=6, temperature=2.0, seed=s, ignore_eos=True)
              for s in range(400)]
    laws: list[list[dict[int, int]]] = []
    for spec in (None, "ngram"):
        engine = make_engine("llama", page_size=4, speculative=spec, num_speculative_tokens=4)
        for i, sp in enumerate(params):
            engine.add_request(f"r{i}", REPEATING, sp)
        outs = drain(engine)
        engine.check_idle_invariant()
        law: list[dict[int, int]] = [{} for _ in range(6)]
        for o in outs.values():
            for pos, tok in enumerate(tokens_of(o)):
                law[pos][tok] = law[pos].get(tok, 0) + 1
        laws.append(law)
    assert engine.stats().spec_accepted_tokens > 200  # many later tokens came from drafts
    for pos in range(1, 6):
        a, b = laws[0][pos], laws[1][pos]
        top = sorted(a, key=a.__getitem__, reverse=True)[:3]
        bins = [(a.get(t, 0), b.get(t, 0)) for t in top]
        bins.append((len(params) - sum(x for x, _ in bins), len(params) - sum(y for _, y in bins)))
        tv = 0.5 * sum(abs(x - y) for x, y in bins) / len(params)
        assert tv < 0.1, (pos, tv, bins)
