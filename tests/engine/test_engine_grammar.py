"""Grammar-constrained decoding in the engine: valid by construction, shared batches, errors."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from minisgl_core.engine.engine import Engine
from minisgl_core.rejection import RequestRejected
from minisgl_core.wire.schema import SamplingParams, StructuredOutput

# bounded so that a random model still finishes well inside max_tokens
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "ok": {"type": "boolean"},
    "color": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
    "required": ["name", "age", "ok", "color"], "additionalProperties": False}
JSON = StructuredOutput("json_schema", json.dumps(SCHEMA))


def run(engine: Engine, prompts: list[list[int]], params: list[SamplingParams],
        ) -> dict[str, tuple[str, str, list[int]]]:
    """request id -> (text, finish reason, token ids)."""
    for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
        engine.add_request(f"r{i}", p, sp)
    tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    reasons: dict[str, str] = {}
    for _ in range(5000):  # bounded: compiles finish in well under a second
        if not engine.has_work():
            break
        for out in engine.step():
            tokens[out.request_id].extend(out.token_ids)
            if out.finish_reason is not None:
                reasons[out.request_id] = out.finish_reason
    assert not engine.has_work()
    engine.check_idle_invariant()
    return {rid: (engine.tokenizer.decode(ids, skip_special_tokens=True), reasons[rid], ids)
            for rid, ids in tokens.items()}


@pytest.fixture(scope="module")
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine("llama")


def prompt(engine: Engine, text: str) -> list[int]:
    return list(engine.tokenizer.encode(text))


def test_json_schema_outputs_validate_and_end_with_eos(engine: Engine) -> None:
    params = [SamplingParams(max_tokens=120, temperature=t, seed=s, structured=JSON)
              for t, s in ((0, None), (1.0, 1), (1.0, 2), (0.7, 3))]
    outs = run(engine, [prompt(engine, "Hello world")] * 4, params)
    for text, reason, ids in outs.values():
        assert reason == "stop", text
        assert ids[-1] in engine.eos_token_ids  # EOS came when the grammar allowed it
        jsonschema.validate(json.loads(text), SCHEMA)
    assert len({o[0] for o in outs.values()}) > 1  # sampling still samples


def test_constrained_and_free_requests_share_a_batch(engine: Engine) -> None:
    free = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    alone = run(engine, [prompt(engine, "The quick brown fox")], [free])["r0"]
    mixed = run(engine, [prompt(engine, "The quick brown fox"), prompt(engine, "Hi")] * 2,
                [free, SamplingParams(max_tokens=120, temperature=0, structured=JSON)] * 2)
    assert mixed["r0"][2] == alone[2] and mixed["r2"][2] == alone[2]
    jsonschema.validate(json.loads(mixed["r1"][0]), SCHEMA)
    assert mixed["r1"][2] == mixed["r3"][2]  # greedy constrained: same input, same output


@pytest.mark.parametrize(("spec", "check"), [
    (StructuredOutput("regex", r"[a-z]{2,5}@[a-z]{2,4}\.(com|org)"),
     lambda t: re.fullmatch(r"[a-z]{2,5}@[a-z]{2,4}\.(com|org)", t)),
    (StructuredOutput("choice", json.dumps(["yes", "no", "café ☕"])),
     lambda t: t in ("yes", "no", "café ☕")),
    (StructuredOutput("grammar", 'root ::= "(" [0-9] [0-9]? ")" | "none"'),
     lambda t: re.fullmatch(r"\(\d\d?\)|none", t)),
])
def test_regex_choice_and_grammar(engine: Engine, spec: StructuredOutput,
                                  check: Callable[[str], Any]) -> None:
    params = [SamplingParams(max_tokens=40, temperature=1.0, seed=s, structured=spec,
                             logprobs=1) for s in range(3)]
    for text, reason, _ in run(engine, [prompt(engine, "Answer:")] * 3, params).values():
        assert reason == "stop" and check(text), text


def test_seeded_constrained_requests_repeat(engine: Engine) -> None:
    sp = SamplingParams(max_tokens=120, temperature=1.0, seed=7, structured=JSON)
    a = run(engine, [prompt(engine, "x y")], [sp])["r0"]
    b = run(engine, [prompt(engine, "x y")], [sp])["r0"]
    assert a == b


def test_stop_strings_and_min_tokens_with_a_grammar(engine: Engine) -> None:
    cut = SamplingParams(max_tokens=120, temperature=0, structured=JSON, stop=('"age"',))
    text, reason, _ = run(engine, [prompt(engine, "Hello")], [cut])["r0"]
    assert reason == "stop" and '"age"' in text  # the engine stops; the detokenizer cuts
    choice = StructuredOutput("choice", json.dumps(["yes", "no"]))
    long = SamplingParams(max_tokens=20, min_tokens=10, temperature=0, structured=choice)
    text, reason, _ = run(engine, [prompt(engine, "Hello")], [long])["r0"]
    assert reason == "stop" and text in ("yes", "no")  # the grammar ends it, not min_tokens


def test_bad_grammar_is_refused_and_leaves_the_engine_idle(engine: Engine) -> None:
    bad = SamplingParams(structured=StructuredOutput("json_schema", '{"type": "foo"}'))
    try:
        engine.add_request("bad", prompt(engine, "x"), bad)  # compiles in the background
    except RequestRejected as exc:
        # the compile thread failed it before add_request looked (a busy host can switch
        # threads right there): refused at once, which is the other correct ending
        assert exc.code == "invalid_grammar" and 'Unsupported type "foo"' in str(exc)
    else:
        outs = []
        # bounded by time, not by steps: a step while the grammar compiles returns at once,
        # and on a loaded host the compile outlasts any fixed number of them
        deadline = time.monotonic() + 120
        while engine.has_work():
            assert time.monotonic() < deadline, "the bad grammar's refusal never came (120 s)"
            outs.extend(engine.step())
        assert [(o.request_id, o.finish_reason) for o in outs] == [("bad", "error")]
        assert outs[0].error is not None and outs[0].error.code == "invalid_grammar"
        assert 'Unsupported type "foo"' in outs[0].error.message
    with pytest.raises(RequestRejected, match="Unsupported type"):  # cached: refused at once
        engine.add_request("bad2", prompt(engine, "x"), bad)
    engine.check_idle_invariant()


def test_abort_while_the_grammar_compiles(engine: Engine) -> None:
    schema = {"type": "object", "properties": {"k": {"type": "string", "pattern": "[a-c]{4}"}}}
    sp = SamplingParams(structured=StructuredOutput("json_schema", json.dumps(schema)))
    engine.add_request("gone", prompt(engine, "x"), sp)
    assert engine.abort("gone")
    assert not engine.has_work()
    engine.check_idle_invariant()


def test_preempted_constrained_requests_stay_valid(make_engine: Callable[..., Engine]) -> None:
    # 24 pages of 4 tokens cannot hold 8 requests of ~60 tokens: some are preempted and
    # recomputed, and their grammar state must carry over
    small = make_engine("llama", num_pages=24, page_size=4, max_running_requests=8,
                        cache="naive")
    params = [SamplingParams(max_tokens=90, temperature=1.0, seed=s, structured=JSON)
              for s in range(8)]
    outs = run(small, [prompt(small, "Hello there")] * 8, params)
    assert small.stats().preemptions > 0
    for text, reason, _ in outs.values():
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), SCHEMA)


def test_tp2_constrained_equals_tp1(tiny_models: dict[str, Any]) -> None:
    from minisgl_core import LLM

    path, opts = str(tiny_models["llama"]), {"page_size": 4, "num_pages": 64, "num_threads": 1}
    sp = SamplingParams(max_tokens=90, temperature=0, structured=JSON)
    with LLM(path, **opts) as one:
        want = [o.text for o in one.generate(["Hello world", "你好"], sp)]
    with LLM(path, tp=2, **opts) as two:  # rank 0 holds the grammar; the follower just runs
        got = [o.text for o in two.generate(["Hello world", "你好"], sp)]
    assert got == want
    for text in got:
        jsonschema.validate(json.loads(text), SCHEMA)


def test_compiled_grammars_are_cached_lru(engine: Engine) -> None:
    from minisgl_core.engine.grammar import GrammarCache

    cache = GrammarCache(engine.tokenizer, engine.vocab_size, engine.eos_token_ids, max_cached=2)
    try:
        a, b, c = (StructuredOutput("regex", r) for r in ("a+", "b+", "c+"))
        first = cache.submit(a)
        assert cache.submit(a) is first  # a hit: the same (shared) compile
        old_b = cache.submit(b)
        cache.submit(a)  # a is now the most recent, so b goes when c comes
        cache.submit(c)
        assert cache.submit(a) is first
        new_b = cache.submit(b)
        assert new_b is not old_b  # evicted, so compiled again
        assert new_b.result(timeout=30) is not None
        assert first.result(timeout=30) is not None
    finally:
        cache.close()
