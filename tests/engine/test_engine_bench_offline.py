"""The offline benchmark on a tiny model: the engine, whole or split over 2 ranks, against
transformers, every token counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl_core.bench import engine_vs_hf as bench

pytestmark = pytest.mark.usefixtures("short_bench_samples")  # conftest.py


@pytest.mark.parametrize("tp", [1, 2])
def test_offline_benchmark_counts_every_token(tiny_models: dict[str, Path], tp: int,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        bench.main(str(tiny_models["llama"]), [1, 3], max_tokens=5, json_lines=True,
                   threads=2, repeat=1, tp=tp)
    finally:
        torch.set_num_threads(threads)  # main sets the process's threads; give them back
    out = capsys.readouterr()
    results = [bench.Result(**json.loads(line)) for line in out.out.splitlines()]
    assert [r.batch for r in results] == [1, 3]
    for r in results:
        assert round(r.engine_tok_s * r.engine_s) == round(r.hf_tok_s * r.hf_s) == r.batch * 5
        assert r.ratio == pytest.approx(r.engine_tok_s / r.hf_tok_s)
    assert ("tensor-parallel over 2 ranks" in out.err) == (tp == 2)


def test_offline_benchmark_runs_fp32_and_int8_against_the_host_ceilings(
        tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        bench.main(str(tiny_models["llama"]), [1, 2], max_tokens=3, json_lines=True,
                   threads=1, repeat=1, quantization=(None, "int8"))
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr()
    results = [bench.Result(**json.loads(line)) for line in out.out.splitlines()]
    assert [(r.batch, r.system) for r in results] == [(1, "fp32"), (1, "int8"), (2, "fp32"),
                                                      (2, "int8")]
    assert "host ceilings (1 threads" in out.err
    for r in results:
        assert round(r.engine_tok_s * r.engine_s) == r.batch * 3
        assert r.bound in ("bandwidth", "compute") and r.ceiling_tok_s > 0
        assert r.ceiling_pct == pytest.approx(100 * r.engine_tok_s / r.ceiling_tok_s)
    table = bench.markdown(results)
    assert "| 2 | int8 |" in table and "% of" in table


def test_roofline_is_bandwidth_at_batch_1_and_compute_when_large() -> None:
    from minisgl_core.bench.ceilings import Ceilings, ModelCost

    host = Ceilings(threads=1, read_gb_s=1.0, fp32_gflop_s=1.0, int8_gop_s=4.0)
    fp32 = ModelCost(weight_bytes=2_000_000_000, fp32_params=500_000_000, int8_params=0)
    assert fp32.roofline(host, 1) == (pytest.approx(0.5), "bandwidth")
    assert fp32.roofline(host, 4) == (pytest.approx(1.0), "compute")
    # int8 layers at the int8 rate, the fp32 rest at fp32's: 1 s + 0.25 s per token
    mixed = ModelCost(weight_bytes=1_000_000_000, fp32_params=500_000_000,
                      int8_params=500_000_000)
    assert mixed.roofline(host, 8) == (pytest.approx(0.8), "compute")
    # where bf16 GEMMs are faster (AMX), the floating-point layers' ceiling is theirs
    amx = Ceilings(threads=1, read_gb_s=1.0, fp32_gflop_s=1.0, int8_gop_s=4.0, bf16_gflop_s=4.0)
    assert fp32.roofline(amx, 4) == (pytest.approx(2.0), "bandwidth")
    assert fp32.roofline(amx, 8) == (pytest.approx(4.0), "compute")
    assert "bf16 GEMM 4 GFLOP/s" in amx.line()
    # two readings of a run: each rate the better of its two
    assert host.best(amx) == Ceilings(1, 1.0, 1.0, 4.0, 4.0)
    slow = Ceilings(threads=1, read_gb_s=0.5, fp32_gflop_s=2.0, int8_gop_s=1.0)
    assert slow.best(host) == Ceilings(1, 1.0, 2.0, 4.0, 0.0) == host.best(slow)


def test_offline_benchmark_runs_each_dtype_and_says_what_auto_chose(
        tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        bench.main(str(tiny_models["llama"]), [1], max_tokens=3, json_lines=True, threads=1,
                   repeat=1, ceilings=False, dtypes=("float32", "auto"))
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr()
    results = [bench.Result(**json.loads(line)) for line in out.out.splitlines()]
    assert [r.system for r in results] == ["fp32", "auto"]
    assert all(round(r.engine_tok_s * r.engine_s) == 3 for r in results)
    assert "fp32: dtype float32 (--dtype float32 given)" in out.err
    header = next(line for line in out.err.splitlines() if line.startswith("  auto: dtype "))
    assert "(auto: " in header and "kernels qkv:" in header
