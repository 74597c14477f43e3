"""N-gram speculation: the same greedy tokens as plain decoding, the same distribution under
sampling, stops and aborts inside an accepted draft, and no page leak."""

from __future__ import annotations

import random

import pytest
import torch

from minisgl_core.engine.speculative import accept_point_mass, propose
from minisgl_core.wire.schema import SamplingParams

REPEATING = [5, 6, 7, 8, 9, 10, 11, 12] * 4
NON_REPEATING = list(range(40, 72))


def _greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, ignore_eos=True, **{"max_tokens": 40, **kw})


def _run(engine, drain, tokens_of, prompts, sp):
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, sp)
    outs = drain(engine)
    engine.check_idle_invariant()
    return [tokens_of(outs[f"r{i}"]) for i in range(len(prompts))], outs


def test_propose_finds_the_latest_full_continuation() -> None:
    assert propose([1, 2, 3, 9, 1, 2, 3, 8, 1, 2], 2, 1, 3) == [3, 8]
    assert propose([1, 2, 3, 4], 3, 1, 3) == []
    assert propose([7, 7, 7], 4, 1, 2) == [7]  # only one token ever followed "7 7"


def test_greedy_tokens_match_plain_decoding(make_engine, drain, tokens_of) -> None:
    prompts = [REPEATING, NON_REPEATING, [3, 4] * 10, list(range(90, 100)) * 2]
    plain, _ = _run(make_engine("llama", page_size=4), drain, tokens_of, prompts, _greedy())
    engine = make_engine("llama", page_size=4, speculative="ngram", num_speculative_tokens=5)
    spec, outs = _run(engine, drain, tokens_of, prompts, _greedy())
    assert spec == plain
    stats = engine.stats()
    assert stats.spec_accepted_tokens > 10  # the repeating prompts did speculate
    assert stats.spec_draft_tokens >= stats.spec_accepted_tokens
    # some step emitted several tokens at once, and outputs carry consistent counts
    assert any(len(o.token_ids) > 1 for o in outs["r0"])
    assert [o.finish_reason for o in outs["r0"]][-1] == "length"


def test_mixed_batch_and_every_arch(make_engine, drain, tokens_of) -> None:
    # a penalised request decodes plainly in the same batch as speculating ones
    for arch in ("llama", "qwen2"):
        plain_engine = make_engine(arch, page_size=4)
        spec_engine = make_engine(arch, page_size=4, speculative="ngram")
        for engine in (plain_engine, spec_engine):
            engine.add_request("pen", REPEATING, _greedy(repetition_penalty=1.3))
        plain, _ = _run(plain_engine, drain, tokens_of, [REPEATING, NON_REPEATING], _greedy())
        spec, _ = _run(spec_engine, drain, tokens_of, [REPEATING, NON_REPEATING], _greedy())
        assert spec == plain


def test_max_tokens_and_stop_ids_inside_a_draft(make_engine, drain, tokens_of) -> None:
    full, _ = _run(make_engine("llama", page_size=4), drain, tokens_of, [REPEATING], _greedy())
    engine = make_engine("llama", page_size=4, speculative="ngram", num_speculative_tokens=6)
    for n in (1, 2, 5, 7, 13):
        got, outs = _run(engine, drain, tokens_of, [REPEATING], _greedy(max_tokens=n))
        assert got[0] == full[0][:n] and outs["r0"][-1].finish_reason == "length"
        assert outs["r0"][-1].completion_tokens == n
    stop = full[0][9]
    got, outs = _run(engine, drain, tokens_of, [REPEATING], _greedy(stop_token_ids=(stop,)))
    assert got[0] == full[0][:full[0].index(stop) + 1]
    assert outs["r0"][-1].finish_reason == "stop"


def test_stop_string_inside_a_draft(make_engine, drain, tokens_of) -> None:
    plain_engine = make_engine("llama", page_size=4)
    full, _ = _run(plain_engine, drain, tokens_of, [REPEATING], _greedy())
    text = plain_engine.tokenizer.decode(full[0][:12])
    stop = text[-3:]
    plain, _ = _run(plain_engine, drain, tokens_of, [REPEATING], _greedy(stop=(stop,)))
    engine = make_engine("llama", page_size=4, speculative="ngram", num_speculative_tokens=6)
    spec, outs = _run(engine, drain, tokens_of, [REPEATING], _greedy(stop=(stop,)))
    assert spec == plain and len(spec[0]) < 40 and outs["r0"][-1].finish_reason == "stop"


def test_logprobs_match_plain_decoding(make_engine, drain, tokens_of) -> None:
    sp = _greedy(max_tokens=12, logprobs=2)
    _, plain = _run(make_engine("llama", page_size=4), drain, tokens_of, [REPEATING], sp)
    _, spec = _run(make_engine("llama", page_size=4, speculative="ngram"), drain, tokens_of,
                   [REPEATING], sp)
    a = [lp for o in plain["r0"] for lp in o.logprobs]
    b = [lp for o in spec["r0"] for lp in o.logprobs]
    assert len(a) == len(b) == 12
    for x, y in zip(a, b, strict=True):
        assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
        assert [t for t, _ in x.top] == [t for t, _ in y.top]


def test_abort_mid_speculation_returns_pages(make_engine) -> None:
    engine = make_engine("llama", page_size=4, speculative="ngram", num_speculative_tokens=6)
    engine.add_request("a", REPEATING, _greedy(max_tokens=200))
    engine.add_request("b", REPEATING, _greedy(max_tokens=200))
    for _ in range(50):
        engine.step()
        if engine.stats().spec_accepted_tokens > 6:
            break
    assert engine.stats().spec_accepted_tokens > 6, "the requests never speculated"
    assert engine.abort("a") and engine.abort("b")
    engine.check_idle_invariant()


def test_soak_leaks_no_pages(make_engine, drain) -> None:
    # a small pool: drafts compete with decodes and admissions for pages, preemption included
    engine = make_engine("llama", page_size=4, num_pages=40, speculative="ngram",
                         num_speculative_tokens=5)
    rng = random.Random(0)
    for i in range(24):
        base = [rng.randrange(3, 200) for _ in range(rng.randrange(2, 8))]
        prompt = (base * 6)[:rng.randrange(8, 40)]
        seeded = i % 3 == 0
        engine.add_request(f"s{i}", prompt, SamplingParams(
            max_tokens=rng.randrange(1, 60), temperature=0.8 if seeded else 0.0,
            seed=i if seeded else None, ignore_eos=True))
        if i % 5 == 4:
            engine.step()
            engine.abort(f"s{i - 1}")
    drain(engine)
    engine.check_idle_invariant()
    assert engine.stats().spec_draft_tokens > 0


def test_rejection_step_keeps_the_distribution() -> None:
    # one step over a vocabulary of 6 through the acceptance function: 6000 draws of a draft
    # that is a point mass on token 2 (and on an unlikely token 5) match p within total
    # variation 0.03 (the sampling noise is ~0.01 at this size; fixed seed)
    p = torch.tensor([0.1, 0.25, 0.3, 0.05, 0.28, 0.02])
    gen = torch.Generator().manual_seed(1234)
    for draft in (2, 5):
        counts = torch.zeros(6)
        accepted = 0
        for _ in range(6000):
            tok, ok = accept_point_mass(p * 3.0, draft, gen)  # unnormalised on purpose
            counts[tok] += 1
            accepted += ok
        tv = 0.5 * (counts / counts.sum() - p).abs().sum().item()
        assert tv < 0.03, (draft, tv, counts)
        assert abs(accepted / 6000 - p[draft].item()) < 0.03


def test_sampled_requests_keep_the_first_token_distribution(make_engine, drain,
                                                            tokens_of) -> None:
    # through the engine: the second output token (the first one a draft can cover) of a
    # sampled repeating prompt has the same distribution with and without speculation (the
    # exact statistical check is the one above; this one catches a wrong wiring)
    sp = [SamplingParams(max_tokens=3, temperature=1.2, seed=s, ignore_eos=True)
          for s in range(300)]
    dists = []
    for spec in (None, "ngram"):
        # one-token matches: the first output token alone then proposes the second
        engine = make_engine("llama", page_size=4, speculative=spec, prompt_lookup_min=1)
        counts: dict[tuple[int, ...], int] = {}
        for i, s in enumerate(sp):
            engine.add_request(f"r{i}", REPEATING, s)
        outs = drain(engine)
        for i in range(len(sp)):
            key = tuple(tokens_of(outs[f"r{i}"])[1:2])
            counts[key] = counts.get(key, 0) + 1
        dists.append(counts)
    keys = set(dists[0]) | set(dists[1])
    tv = 0.5 * sum(abs(dists[0].get(k, 0) - dists[1].get(k, 0)) for k in keys) / len(sp)
    assert engine.stats().spec_draft_tokens > 100  # the second token was mostly drafted
    assert tv < 0.12, tv  # same seeds, ~6 likely tokens: equal laws differ by ~0.03 here


def test_counters_reach_metrics(make_engine, drain, tokens_of) -> None:
    from minisgl_frontend_openai.metrics import FrontendMetrics

    from minisgl_core.service.scheduler_loop import SchedulerLoop

    engine = make_engine("llama", page_size=4, speculative="ngram")
    _run(engine, drain, tokens_of, [REPEATING], _greedy())
    counters = SchedulerLoop(engine, None, None, print).stats().counters  # type: ignore[arg-type]
    s = engine.stats()
    assert counters["spec_draft_tokens_total"] == s.spec_draft_tokens > 0
    assert counters["spec_accepted_tokens_total"] == s.spec_accepted_tokens > 0
    text = FrontendMetrics().render(counters)
    assert f"minisgl_spec_draft_tokens_total {s.spec_draft_tokens}" in text
    assert "# TYPE minisgl_spec_accepted_tokens_total counter" in text
