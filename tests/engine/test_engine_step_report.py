"""The decode step report (bench/profile.py) on a tiny model: its parts add up to the step, its
weight bytes are the engine's packed matmul weights, the ops land in the named groups, and
`bench offline --profile` prints it at the bandwidth it measured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from minisgl_core.bench import engine_vs_hf as bench
from minisgl_core.bench.ceilings import model_cost
from minisgl_core.bench.profile import (
    COMPILED,
    GROUPS,
    OTHER,
    PYTHON,
    format_profile,
    profile_decode,
    split_ops,
    unprofiled,
)
from minisgl_core.engine.engine import Engine

pytestmark = pytest.mark.usefixtures("short_bench_samples")  # conftest.py

PROMPTS = [[1, 5, 9, 13, 17], [2, 6, 10], [3, 7, 11, 15], [4, 8]]


@pytest.fixture(scope="module")
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine("llama", dtype="bfloat16", quantization="int4")


@pytest.fixture(scope="module")
def reports(engine: Engine) -> list[dict[str, Any]]:
    # 20 GB/s: any bandwidth; the weight time is the packed bytes over it
    return [profile_decode(engine, PROMPTS[:b], steps=3, top=4, read_gb_s=20.0) for b in (1, 4)]


def test_parts_add_up_to_the_step(reports: list[dict[str, Any]]) -> None:
    for r in reports:
        assert r["step_ms"] > 0
        assert sum(r["parts"].values()) == pytest.approx(r["step_ms"], rel=1e-6)
        assert all(v >= 0 for v in r["parts"].values())
        names = list(r["parts"])
        assert names[:2] == ["weight bytes", "matmul beyond weight bytes"]
        assert names[-1] == PYTHON
        assert set(names[2:-1]) == (set(GROUPS) - {"matmul"}) | {COMPILED, OTHER}


def test_weight_bytes_are_the_engines_packed_weights(engine: Engine,
                                                      reports: list[dict[str, Any]]) -> None:
    packed = sum(getattr(layer, n).stored_nbytes() for layer in engine.model.layers
                 for n in ("qkv", "o", "gate_up", "down")) + engine.model.lm_head.stored_nbytes()
    assert packed == model_cost(engine.model).weight_bytes
    for r in reports:
        assert r["weight_bytes"] == packed
        matmul = r["parts"]["weight bytes"] + r["parts"]["matmul beyond weight bytes"]
        # the weights' time at 20 GB/s, unless the whole matmul group took less
        assert r["parts"]["weight bytes"] == pytest.approx(min(matmul, packed / 20e9 * 1e3))


def test_the_decoder_ops_land_in_named_groups(reports: list[dict[str, Any]]) -> None:
    for r in reports:
        parts = r["parts"]
        # every layer normalizes twice, runs four matmuls and attends, and a token is sampled;
        # a group's ops are counted (its time, less the profiler's cost, may round to nothing)
        for group in ("matmul", "norms", "attention", "rotary", "SiLU x up", "sampling"):
            assert r["events"][group] > 0, group
        # the decoder's and sampler's ops are all named: what is left is a small remainder
        assert parts[OTHER] < 0.2 * r["step_ms"], r.get("top_other_ops")
        # the norm's own sum and divide count as norm time, not as ops of no group
        assert not {"aten::sum", "aten::div_", "aten::rsqrt_"} & set(r["top_other_ops"])


def test_the_table_has_a_row_per_part_and_a_column_per_batch(
        reports: list[dict[str, Any]]) -> None:
    text = format_profile("bf16-int4", reports)
    lines = text.splitlines()
    assert lines[0].startswith("decode step, bf16-int4, ms per step; weight bytes: ")
    assert "at 20.0 GB/s" in lines[0]
    assert lines[1] == "| part | batch 1 | batch 4 |"
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[0][2:] for row in rows] == [*reports[0]["parts"], "**step**"]
    step_cells = rows[-1].strip("| ").split(" | ")[1:]
    assert [float(c.strip("*")) for c in step_cells] == pytest.approx(
        [r["step_ms"] for r in reports], abs=0.006)


@dataclass
class _Event:  # what split_ops reads of a profiler event
    name: str
    self_cpu_time_total: float  # us
    cpu_parent: _Event | None = None


def test_a_compiled_steps_ops_count_for_their_groups_and_its_fused_code_apart() -> None:
    region = _Event("Torch-Compiled Region: 0/1", 100.0)
    graph = _Event("## Call CompiledFxGraph f3gu4lq ##", 3000.0, region)
    linear = _Event("minisgl::native_linear", 10000.0, graph)
    events = [region, graph, linear, _Event("aten::empty", 10.0, linear),
              _Event("minisgl::native_decode_attention", 5000.0, graph),
              _Event("TorchDynamo Cache Lookup", 400.0),
              _Event("minisgl::native_linear", 1700.0),  # the LM head, outside the graph
              _Event("minisgl::sample", 300.0), _Event("aten::flatten", 20.0)]
    groups, counts, others = split_ops(events, steps=2)
    assert groups["matmul"] == pytest.approx((10000 + 10 + 1700) / 2e3)
    assert groups["attention"] == pytest.approx(2.5)
    assert groups[COMPILED] == pytest.approx((100 + 3000 + 400) / 2e3)  # wrappers and guards
    assert groups["sampling"] == pytest.approx(0.15)
    assert others == {"aten::flatten": pytest.approx(0.01)}
    assert counts[PYTHON] == pytest.approx(5 / 2)  # the events with no parent
    assert counts["matmul"] == pytest.approx(3 / 2)


def test_the_profilers_cost_comes_out_of_each_group_by_its_events() -> None:
    # profiled 12 ms, unprofiled 9: 3 ms over 3,000 events is 1 us an event
    groups = {"matmul": 6.0, "norms": 1.5}
    counts = {"matmul": 300.0, "norms": 1_000.0, PYTHON: 1_700.0}
    parts = unprofiled(groups, counts, profiled_ms=12.0, wall_ms=9.0)
    assert parts["matmul"] == pytest.approx(5.7)
    assert parts["norms"] == pytest.approx(0.5)
    assert parts[PYTHON] == pytest.approx(9.0 - 6.2)
    # groups that would leave python/dispatch less than nothing are scaled to the step
    tight = unprofiled({"matmul": 9.0, "norms": 3.0},
                       {"matmul": 1.0, "norms": 1.0, PYTHON: 1_000.0}, 12.0, 6.0)
    assert tight["matmul"] == pytest.approx(4.5, rel=1e-3)
    assert tight["norms"] == pytest.approx(1.5, rel=1e-2)
    assert sum(tight.values()) == pytest.approx(6.0)
    assert tight[PYTHON] == pytest.approx(0.0, abs=1e-9)


def test_bench_offline_profile_prints_the_table_at_this_runs_bandwidth(
        tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:  # no ceilings asked: the profile measures the bandwidth all the same
        bench.main(str(tiny_models["llama"]), [1, 2], max_tokens=3, json_lines=True,
                   threads=1, repeat=1, profile=True, ceilings=False)
    finally:
        torch.set_num_threads(threads)  # main sets the process's threads; give them back
    err = capsys.readouterr().err
    bandwidth = float(err.split("host ceilings (1 threads, measured in this run): memory read ")[1]
                      .split(" GB/s")[0])
    assert "decode step, fp32, ms per step; weight bytes: " in err
    assert f"at {bandwidth:.1f} GB/s (read bandwidth of this run)" in err
    assert "| part | batch 1 | batch 2 |" in err
