"""``minisgl bench speculative`` on the tiny model: both workloads, both systems, same tokens."""

from __future__ import annotations

import pytest

from minisgl_core.bench.speculative import markdown, run


@pytest.mark.parametrize("quantization,dtype", [(None, "auto"), ("int4", "bfloat16")])
def test_bench_runs_every_case_and_keeps_greedy_tokens(tiny_models, quantization: str | None,
                                                       dtype: str) -> None:
    lines: list[str] = []
    results = run(str(tiny_models["llama"]), requests=2, max_tokens=12, concurrencies=(1, 2),
                  repeat=1, threads=1, ceilings=False, say=lines.append,
                  quantization=quantization, dtype=dtype, lookup_min=1)
    assert f"quantization {quantization or 'none'}" in lines[0] and "n-grams of 1 to 4" in lines[0]
    assert [(r.workload, r.concurrency, r.speculative) for r in results] == [
        (w, c, s) for w in ("repeating", "stories") for c in (1, 2) for s in (False, True)]
    for plain, spec in zip(results[::2], results[1::2], strict=True):
        assert plain.outputs == spec.outputs and plain.tokens == spec.tokens == 24
        assert plain.drafted == 0 and spec.accepted <= spec.drafted
    table = markdown(results)
    assert "DIFFERENT" not in table and table.count("greedy outputs identical") == 4
