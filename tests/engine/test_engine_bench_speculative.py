"""``minisgl bench speculative`` on the tiny model: both workloads, both systems, same tokens."""

from __future__ import annotations

from minisgl_core.bench.speculative import markdown, run


def test_bench_runs_every_case_and_keeps_greedy_tokens(tiny_models) -> None:
    lines: list[str] = []
    results = run(str(tiny_models["llama"]), requests=2, max_tokens=12, concurrencies=(1, 2),
                  repeat=1, threads=1, ceilings=False, say=lines.append)
    assert [(r.workload, r.concurrency, r.speculative) for r in results] == [
        (w, c, s) for w in ("repeating", "stories") for c in (1, 2) for s in (False, True)]
    for plain, spec in zip(results[::2], results[1::2], strict=True):
        assert plain.outputs == spec.outputs and plain.tokens == spec.tokens == 24
        assert plain.drafted == 0 and spec.accepted <= spec.drafted
    table = markdown(results)
    assert "DIFFERENT" not in table and table.count("greedy outputs identical") == 4
