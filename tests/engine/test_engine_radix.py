"""Radix prefix cache: same greedy tokens as without it, page accounting under eviction, reports."""

from __future__ import annotations

import random

import pytest

from minisgl_core.engine.engine import Engine
from minisgl_core.engine.kv_cache import PageAllocator
from minisgl_core.engine.radix_cache import Node, RadixCache
from minisgl_core.wire.schema import SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def _check_pages(engine: Engine) -> None:
    """Every page is free, in the tree, or private to one running request; lock counts agree."""
    cache = engine.batcher.cache
    assert cache is not None
    nodes = cache._nodes()
    tree = [n.page for n in nodes]
    running = engine.batcher.running
    private = [p for r in running for p in r.pages[r.num_shared_pages:]]
    assert len(tree) == len(set(tree)) == cache.num_pages
    assert len(private) == len(set(private)), "a private page is held twice"
    assert not set(private) & set(tree), "a tree page is also private to a request"
    assert engine.allocator.num_free + len(private) + len(tree) == engine.num_pages
    assert all(not r.pages and r.cache_node is None for r in engine.batcher.waiting)
    refs: dict[int, int] = {}
    for r in running:
        node = r.cache_node
        assert node is not None
        path = []
        while node is not cache.root:
            path.append(node)
            refs[id(node)] = refs.get(id(node), 0) + 1
            node = node.parent
        # the request's shared pages are exactly the pages along its locked path
        assert [n.page for n in reversed(path)] == r.pages[:r.num_shared_pages]
    assert all(n.ref == refs.get(id(n), 0) for n in nodes), "a lock count is off"
    assert cache.num_evictable == sum(1 for n in nodes if n.ref == 0)


def _run(engine: Engine, prompts: dict[str, list[int]], waves: list[list[str]],
         sp: SamplingParams = GREEDY) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Add each wave once the previous one finished; tokens and reported cached_tokens."""
    tokens: dict[str, list[int]] = {}
    cached: dict[str, int] = {}
    for wave in waves:
        for rid in wave:
            engine.add_request(rid, prompts[rid], sp)
        for _ in range(2000):
            if not engine.has_work():
                break
            for o in engine.step():
                tokens.setdefault(o.request_id, []).extend(o.token_ids)
                cached[o.request_id] = o.cached_tokens
        assert not engine.has_work()
    engine.check_idle_invariant()
    return tokens, cached


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_radix_greedy_outputs_equal_naive(arch, make_engine) -> None:
    rng = random.Random(11)
    system = [rng.randrange(3, 300) for _ in range(37)]
    prompts = {f"u{i}": system + [rng.randrange(3, 300) for _ in range(rng.randrange(1, 12))]
               for i in range(6)}
    prompts["same"] = list(prompts["u0"])  # an exact repeat
    prompts["short"] = system[:9]  # a prefix of the shared prompt
    waves = [["u0"], ["u1", "u2", "same"], ["u3", "u4", "u5", "short"]]
    opts = {"page_size": 4, "max_prefill_tokens": 16}
    want, naive_cached = _run(make_engine(arch, cache="naive", **opts), prompts, waves)
    radix = make_engine(arch, cache="radix", **opts)
    got, cached = _run(radix, prompts, waves)
    assert got == want
    assert set(naive_cached.values()) == {0}
    # u0's prompt and output pages were cached when the second wave came
    assert cached["u0"] == 0 and cached["same"] == (len(prompts["u0"]) - 1) // 4 * 4
    assert all(cached[f"u{i}"] >= 36 for i in range(1, 6)), cached
    assert cached["short"] == 8  # 9 tokens: two pages reused, the last token computed
    stats = radix.stats()
    assert stats.cache_hit_tokens == sum(cached.values())
    assert stats.pages_cached > 0 and stats.pages_free == stats.pages_total


def test_concurrent_requests_share_pages_as_soon_as_computed(make_engine) -> None:
    rng = random.Random(5)
    system = [rng.randrange(3, 300) for _ in range(40)]
    prompts = {f"r{i}": system + [3 + i, 4 + i] for i in range(5)}
    opts = {"page_size": 4, "max_prefill_tokens": 42}
    want, _ = _run(make_engine("llama", cache="naive", **opts), prompts, [list(prompts)])
    engine = make_engine("llama", cache="radix", **opts)
    got, cached = _run(engine, prompts, [list(prompts)])
    assert got == want
    # r0 takes the whole first step's budget; the others start once its pages are in the tree
    assert cached["r0"] == 0 and all(cached[f"r{i}"] == 40 for i in range(1, 5))


def test_eviction_under_pressure_never_frees_a_page_in_use(make_engine) -> None:
    rng = random.Random(99)
    # 16 pages of 4 tokens and prompts sharing a few prefixes: the tree fills the pool, so
    # admissions and decodes evict, and requests are preempted and aborted along the way
    engine = make_engine("llama", num_pages=16, page_size=4, max_running_requests=8,
                         max_prefill_tokens=16, cache="radix")
    heads = [[rng.randrange(3, 300) for _ in range(rng.randrange(4, 20))] for _ in range(4)]
    prompts: dict[str, list[int]] = {}
    limits: dict[str, int] = {}
    for i in range(40):
        prompts[f"r{i}"] = rng.choice(heads) + [rng.randrange(3, 300)
                                                for _ in range(rng.randrange(1, 12))]
        limits[f"r{i}"] = rng.randrange(1, 16)
    got: dict[str, list[int]] = {}
    finished: set[str] = set()
    aborted: set[str] = set()
    added: list[str] = []
    for _ in range(4000):
        if len(added) < len(prompts) and rng.random() < 0.7:
            rid = f"r{len(added)}"
            engine.add_request(rid, prompts[rid], SamplingParams(
                max_tokens=limits[rid], temperature=0.0, ignore_eos=True))
            added.append(rid)
        if added and rng.random() < 0.08:
            rid = rng.choice(added)
            if engine.abort(rid):
                aborted.add(rid)
        for o in engine.step():
            assert o.request_id not in finished | aborted
            got.setdefault(o.request_id, []).extend(o.token_ids)
            if o.finish_reason is not None:
                finished.add(o.request_id)
        _check_pages(engine)
        if len(added) == len(prompts) and not engine.has_work():
            break
    assert not engine.has_work() and finished | aborted == set(added)
    engine.check_idle_invariant()
    cache = engine.batcher.cache
    assert cache is not None and cache.evicted_pages > 0 and cache.hit_tokens > 0
    assert engine.stats().preemptions > 0, "the pool was meant to be too small for the load"
    # a page reused while still in use would corrupt K/V: every finished request's tokens
    # equal those of a naive engine that never shares nor evicts
    ref = make_engine("llama", page_size=4, cache="naive")
    want, _ = _run(ref, {r: prompts[r] for r in finished}, [sorted(finished)],
                   SamplingParams(max_tokens=15, temperature=0.0, ignore_eos=True))
    for rid in finished:
        assert got[rid] == want[rid][:limits[rid]], rid


def test_tree_lru_eviction_skips_locked_paths() -> None:
    alloc = PageAllocator(8)
    cache = RadixCache(alloc, page_size=2)
    a = alloc.alloc(3)
    node_a, path, dups = cache.insert(cache.root, [1, 2, 3, 4, 5, 6], a)
    assert path == a and dups == [] and cache.num_pages == cache.num_evictable == 3
    b = alloc.alloc(2)
    node_b, path, dups = cache.insert(cache.root, [1, 2, 7, 8], b)
    assert path == [a[0], b[1]] and dups == [b[0]]  # the first page was there already
    alloc.free(dups)
    assert cache.match([1, 2, 3, 4, 9]) == (node_a.parent, a[:2])
    cache.lock(node_b)  # [1,2] and [7,8] in use
    assert cache.num_evictable == 2
    assert cache.evict(10) == 2  # only [5,6] then [3,4]: the locked path stays
    assert cache.num_pages == 2 and cache.match([1, 2, 7, 8])[1] == [a[0], b[1]]
    cache.unlock(node_b)
    free_before = alloc.num_free
    assert cache.evict(1) == 1 and cache.match([1, 2, 7, 8])[1] == [a[0]]  # leaf first
    assert alloc.num_free == free_before + 1
    assert cache.evict(5) == 1 and cache.num_pages == 0 and alloc.num_free == 8
    assert isinstance(cache.root, Node) and not cache.root.children


def test_lru_order_prefers_the_least_recently_used_leaf() -> None:
    alloc = PageAllocator(4)
    cache = RadixCache(alloc, page_size=1)
    old, _, _ = cache.insert(cache.root, [1], alloc.alloc(1))
    new, _, _ = cache.insert(cache.root, [2], alloc.alloc(1))
    cache.lock(old)  # using it makes it the most recent
    cache.unlock(old)
    assert cache.evict(1) == 1
    assert cache.match([1])[1] == [old.page] and cache.match([2])[1] == []
    assert new.page in alloc._free


def test_scheduler_stats_report_cached_pages_and_hits(make_engine) -> None:
    from minisgl_core.service.scheduler_loop import SchedulerLoop

    engine = make_engine("llama", page_size=4)
    prompt = list(range(3, 30))
    _run(engine, {"a": prompt, "b": prompt}, [["a"], ["b"]])
    stats = SchedulerLoop(engine, None, None, print).stats()  # type: ignore[arg-type]
    g, c = stats.gauges, stats.counters
    assert g["kv_pages_cached"] > 0 and g["kv_pages_free"] == g["kv_pages_total"]
    assert c["prefix_cache_hit_tokens_total"] == 24


def test_naive_cache_keeps_no_pages(make_engine) -> None:
    engine = make_engine("llama", page_size=4, cache="naive")
    prompt = list(range(3, 30))
    _, cached = _run(engine, {"a": prompt, "b": prompt}, [["a"], ["b"]])
    assert cached == {"a": 0, "b": 0} and engine.allocator.num_free == engine.num_pages
    assert engine.stats().pages_cached == 0 and engine.batcher.cache is None
    with pytest.raises(ValueError, match="cache"):
        make_engine("llama", cache="lru")
