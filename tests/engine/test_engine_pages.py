"""Page accounting under load: random requests, random aborts, preemption; every page comes back."""

from __future__ import annotations

import random

from minisgl_core.engine.engine import Engine
from minisgl_core.engine.request import State
from minisgl_core.wire.schema import SamplingParams


def _check_pages(engine: Engine) -> None:
    # a page is free, or in the prefix cache's tree (and maybe shared by running requests), or
    # private to one running request
    cache = engine.batcher.cache
    tree = cache.pages() if cache else []
    running = engine.batcher.running
    held = [p for r in running for p in r.pages[r.num_shared_pages:]]
    shared = {p for r in running for p in r.pages[:r.num_shared_pages]}
    assert len(held) == len(set(held)), "a page is held twice"
    assert shared <= set(tree) and not set(held) & set(tree)
    assert all(not r.pages for r in engine.batcher.waiting), "a waiting request holds pages"
    assert engine.allocator.num_free + len(held) + len(tree) == engine.num_pages


def _random_sampling(rng: random.Random) -> SamplingParams:
    return SamplingParams(
        max_tokens=rng.randrange(1, 30),
        temperature=rng.choice([0.0, 0.7, 1.0]),
        top_k=rng.choice([0, 5]),
        top_p=rng.choice([1.0, 0.9]),
        seed=rng.choice([None, rng.randrange(1000)]),
        stop_token_ids=tuple(rng.sample(range(3, 300), 2)) if rng.random() < 0.3 else (),
        presence_penalty=rng.choice([0.0, 0.5]),
        ignore_eos=rng.random() < 0.5,
    )


def test_random_requests_and_aborts_free_every_page(make_engine) -> None:
    rng = random.Random(1234)
    # 40 pages of 4 tokens: far less than the load needs, so requests get preempted
    engine = make_engine("llama", num_pages=40, page_size=4, max_running_requests=16,
                         max_prefill_tokens=32)
    added: list[str] = []
    aborted: set[str] = set()
    finished: dict[str, str] = {}
    counts: dict[str, int] = {}
    limits: dict[str, int] = {}
    for _ in range(3000):
        if len(added) < 64 and rng.random() < 0.5:
            rid = f"r{len(added)}"
            sp = _random_sampling(rng)
            prompt = [rng.randrange(3, engine.vocab_size) for _ in range(rng.randrange(1, 45))]
            engine.add_request(rid, prompt, sp)
            added.append(rid)
            limits[rid] = sp.max_tokens or 0
        if added and rng.random() < 0.15:
            rid = rng.choice(added)
            was_live = rid not in aborted and rid not in finished
            assert engine.abort(rid) is was_live
            aborted.add(rid)
            assert engine.abort(rid) is False  # idempotent
        for out in engine.step():
            rid = out.request_id
            assert rid not in finished and rid not in aborted, f"{rid} emitted after its end"
            counts[rid] = counts.get(rid, 0) + len(out.token_ids)
            assert out.completion_tokens == counts[rid]
            if out.finish_reason is not None:
                assert out.finish_reason in ("stop", "length")
                finished[rid] = out.finish_reason
        _check_pages(engine)
        if len(added) == 64 and not engine.has_work():
            break
    assert len(added) == 64
    assert not engine.has_work()
    assert set(finished) | aborted == set(added)
    for rid, reason in finished.items():
        assert counts[rid] <= limits[rid]
        assert (counts[rid] == limits[rid]) or reason == "stop"
    engine.check_idle_invariant()
    stats = engine.stats()
    assert stats.pages_free == stats.pages_total == 40
    assert stats.running == stats.waiting == 0
    assert stats.preemptions > 0, "the pool was meant to be too small for the load"
    assert engine.requests == {}


def test_abort_waiting_running_and_mid_prefill_requests(make_engine) -> None:
    engine = make_engine("llama", page_size=4, max_prefill_tokens=8, max_running_requests=2)
    sp = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    engine.add_request("long", list(range(3, 40)), sp)  # 37 tokens: five 8-token chunks
    engine.add_request("b", [5, 6, 7], sp)
    engine.add_request("queued", [8, 9], sp)  # over max_running_requests: waits
    engine.step()
    long = engine.requests["long"]
    assert long.state is State.RUNNING and 0 < long.num_cached < 37 and long.pages
    assert engine.requests["queued"].state is State.WAITING
    assert engine.abort("long") and not long.pages
    assert engine.abort("queued")
    assert not engine.abort("queued") and not engine.abort("never-seen")
    outs = [o for _ in range(40) for o in engine.step()]
    assert {o.request_id for o in outs} == {"b"}
    assert sum(len(o.token_ids) for o in outs) == 20
    engine.check_idle_invariant()
