"""The prefix-cache benchmark on a tiny model: both caches, both arrivals, same greedy tokens."""

from __future__ import annotations

from minisgl_core.bench import prefix_cache as bench_prefix


def test_prefix_benchmark_runs_and_radix_computes_fewer_prefill_tokens(tiny_models) -> None:
    lines: list[str] = []
    results = bench_prefix.run(str(tiny_models["llama"]), requests=4, system_tokens=60,
                               max_tokens=3, threads=1, say=lines.append)
    assert [(r.cache, r.arrival) for r in results] == [
        ("naive", "sequential"), ("radix", "sequential"), ("naive", "burst"), ("radix", "burst")]
    by = {(r.cache, r.arrival): r for r in results}
    for arrival in bench_prefix.ARRIVALS:
        naive, radix = by["naive", arrival], by["radix", arrival]
        assert naive.outputs == radix.outputs and all(len(o) == 3 for o in naive.outputs)
        assert naive.prefill_tokens == naive.prompt_tokens == radix.prompt_tokens
        assert radix.prefill_tokens <= naive.prefill_tokens
    # (a burst this small is prefilled in one step, before anything is cached); sequential
    # arrivals: every request after the first reuses the shared system prompt
    seq = by["radix", "sequential"]
    assert seq.prompt_tokens - seq.prefill_tokens >= 3 * 60
    table = bench_prefix.markdown(results)
    assert "greedy outputs identical" in table and "DIFFERENT" not in table
