"""``--dtype auto``: bf16 only where it measures faster, fp32 elsewhere; the same for a cache."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from minisgl_core.engine import dtype_choice
from minisgl_core.engine.config import EngineConfig, ModelConfig
from minisgl_core.engine.dtype_choice import choose_dtype, resolve
from minisgl_core.kernels import bf16_fast
from minisgl_core.kernels.matmul.registry import all_kernels

CPU = torch.device("cpu")


def model_sized(cfg: ModelConfig) -> ModelConfig:
    """``cfg`` with the default model's widths: a gate|up layer big enough to be timed."""
    return dataclasses.replace(cfg, hidden_size=576, intermediate_size=1536)


def test_a_layer_too_small_to_time_keeps_fp32_on_every_host(tiny_models: dict[str, Path],
                                                             tmp_path: Path) -> None:
    cfg = ModelConfig.from_dir(tiny_models["llama"])
    assert 2 * cfg.intermediate_size * cfg.hidden_size < dtype_choice.MIN_WEIGHTS
    for quantization in (None, "int8-wo", "int4"):
        choice = choose_dtype(cfg, CPU, quantization, cache=tmp_path)
        assert choice.dtype == "float32"
        assert "too small to time" in choice.reason or "AVX512-BF16" in choice.reason
    assert not list(tmp_path.glob("linear-*.json"))  # nothing timed


def test_auto_is_the_same_choice_for_a_given_cache(tiny_models: dict[str, Path], tmp_path: Path,
                                                    monkeypatch) -> None:
    monkeypatch.delenv("MINISGL_LINEAR", raising=False)
    cfg = model_sized(ModelConfig.from_dir(tiny_models["llama"]))
    # a budget a busy host cannot run out of: a partial measurement is not cached
    first = choose_dtype(cfg, CPU, cache=tmp_path, budget_s=120.0)
    assert first.dtype in ("float32", "bfloat16") and "not measured" not in first.reason
    cached = list(tmp_path.glob("linear-*.json"))
    again = choose_dtype(cfg, CPU, cache=tmp_path)
    assert again.dtype == first.dtype and list(tmp_path.glob("linear-*.json")) == cached
    assert again.reason == first.reason.replace("measured", "cached")  # the same timings
    if not bf16_fast():  # an AVX2-only host: bf16 is emulated there, never timed nor chosen
        assert first.dtype == "float32" and not cached


def test_bf16_is_never_chosen_where_the_cpu_would_emulate_it(tiny_models: dict[str, Path],
                                                             tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dtype_choice, "bf16_fast", lambda: False)  # as on an AVX2-only CPU
    cfg = ModelConfig.from_dir(tiny_models["llama"])
    choice = choose_dtype(cfg, CPU, cache=tmp_path)
    assert choice.dtype == "float32" and "AVX512-BF16" in choice.reason


@pytest.mark.skipif(not dtype_choice.bf16_fast(), reason="bf16 is not a candidate here")
def test_cached_timings_too_far_apart_are_taken_again(tiny_models: dict[str, Path],
                                                      tmp_path: Path) -> None:
    cfg = model_sized(ModelConfig.from_dir(tiny_models["llama"]))
    first = choose_dtype(cfg, CPU, cache=tmp_path, budget_s=120.0)
    assert "measured" in first.reason
    # as if fp32 had been timed beside a busy core: 1,000x, far past MAX_RATIO whatever the two
    # dtypes' own ratio on this host (bf16 can time several times fp32 on a noisy one)
    slow = None
    for path in tmp_path.glob("linear-*.json"):
        body = json.loads(path.read_text())
        if body["key"]["dtype"] == "torch.float32":
            inflated = {role: {k: [t * 1000 for t in ts] for k, ts in by_kernel.items()}
                        for role, by_kernel in body["seconds"].items()}
            slow = inflated["gate_up"]
            path.write_text(json.dumps({**body, "seconds": inflated}))
    assert slow is not None
    again = choose_dtype(cfg, CPU, cache=tmp_path, budget_s=120.0)
    assert "measured" in again.reason and "cached" not in again.reason, again.reason  # anew
    bodies = [json.loads(p.read_text()) for p in tmp_path.glob("linear-*.json")]
    fp32_times = [b["seconds"]["gate_up"] for b in bodies if b["key"]["dtype"] == "torch.float32"]
    assert fp32_times and fp32_times[0] != slow  # the inflated file was replaced


@pytest.mark.skipif(not dtype_choice.bf16_fast(), reason="bf16 is not a candidate here")
def test_one_dtype_cached_and_the_other_not_are_timed_again_together(
        tiny_models: dict[str, Path], tmp_path: Path) -> None:
    cfg = model_sized(ModelConfig.from_dir(tiny_models["llama"]))
    choose_dtype(cfg, CPU, cache=tmp_path, budget_s=120.0)
    for path in tmp_path.glob("linear-*.json"):  # as if bf16 had been timed at an earlier start
        if json.loads(path.read_text())["key"]["dtype"] == "torch.float32":
            path.unlink()
    again = choose_dtype(cfg, CPU, cache=tmp_path, budget_s=120.0)
    assert "cached" not in again.reason and again.reason.count("measured") == 2, again.reason


def test_int8_auto_runs_in_fp32(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    cfg = ModelConfig.from_dir(tiny_models["llama"])
    choice = choose_dtype(cfg, CPU, "int8", cache=tmp_path)
    assert choice == dtype_choice.DtypeChoice("float32", "--quantization int8 runs in fp32")
    assert not list(tmp_path.glob("linear-*.json"))  # decided without timing anything


@pytest.mark.skipif(not dtype_choice.bf16_fast(), reason="bf16 is not a candidate here")
@pytest.mark.parametrize("quantization", ["int8-wo", "int4"])
def test_weight_only_auto_times_its_own_kernels(tiny_models: dict[str, Path], tmp_path: Path,
                                                quantization: str) -> None:
    cfg = model_sized(ModelConfig.from_dir(tiny_models["llama"]))
    choice = choose_dtype(cfg, CPU, quantization, cache=tmp_path, budget_s=60.0)
    assert choice.dtype in ("float32", "bfloat16")
    timed_what = (f"the model's {quantization} matmuls (2 layers and the LM head) at "
                  "1/8/32/128/512 rows")
    # where both dtypes measured the same kernels, all rounding their inputs to int8 (the
    # panels, on a host with VNNI), the same-kernels rule gives bf16 and says so first
    if choice.reason.startswith("the same kernels in both dtypes"):
        assert choice.dtype == "bfloat16" and timed_what in choice.reason
    else:
        assert choice.reason.startswith(timed_what)
    timed = [json.loads(p.read_text()) for p in tmp_path.glob("linear-*.json")]
    assert sorted(t["key"]["dtype"] for t in timed) == ["torch.bfloat16", "torch.float32"]
    kernels = all_kernels()
    assert all(kernels[t["choice"]["gate_up"][0]].quantized == quantization
               for t in timed)  # the weight-only kernels, not the dense ones


def test_an_auto_engine_runs_in_the_dtype_it_chose(tiny_models: dict[str, Path],
                                                   make_engine) -> None:
    explicit = EngineConfig(model=str(tiny_models["llama"]), dtype="bfloat16")
    assert resolve(explicit) is explicit  # only "auto" is measured
    engine = make_engine("llama", dtype="auto")
    assert engine.config.dtype in ("float32", "bfloat16")
    assert engine.dtype == getattr(torch, engine.config.dtype)
    assert engine.model.embed.dtype == engine.dtype and engine.kv.k.dtype == engine.dtype


@pytest.mark.parametrize("name", ["float32", "auto"])
def test_auto_is_a_launch_dtype(name: str) -> None:
    from minisgl_core.config.launch import DTYPES

    assert name in DTYPES


@pytest.mark.parametrize(("fp32", "bf16", "want"), [
    # decode a hair faster in fp32, prefill twice as fast in bf16 (the int4 panels on AMX)
    ((1.0, 1.0, 1.0, 4.0, 16.0), (1.05, 1.05, 1.05, 2.0, 8.0), "bfloat16"),
    # bf16 twice as slow at every decode bucket, a little faster at prefill
    ((1.0, 1.0, 1.0, 4.0, 16.0), (2.0, 2.0, 2.0, 3.6, 14.4), "float32"),
    # the same kernels in both, bf16 4% behind by noise: a tie, which bf16 takes
    ((1.0, 1.0, 1.0, 4.0, 16.0), (1.04, 1.04, 1.04, 4.16, 16.64), "bfloat16"),
    # fp32 ahead by more than BF16_TIE
    ((1.0, 1.0, 1.0, 4.0, 16.0), (1.07, 1.07, 1.07, 4.28, 17.12), "float32"),
])
def test_every_bucket_counts_by_its_slowdown(tiny_models: dict[str, Path], monkeypatch,
                                             fp32: tuple[float, ...], bf16: tuple[float, ...],
                                             want: str) -> None:
    monkeypatch.setattr(dtype_choice, "bf16_fast", lambda: True)
    timed = {"float32": (tuple(t * 1e-3 for t in fp32), "k, measured", None),
             "bfloat16": (tuple(t * 1e-3 for t in bf16), "k, measured", None)}
    monkeypatch.setattr(dtype_choice, "_time_both", lambda *args, **kwargs: timed)
    cfg = model_sized(ModelConfig.from_dir(tiny_models["llama"]))
    choice = choose_dtype(cfg, CPU, "int4")
    assert choice.dtype == want
    decode = (f"bf16 {'/'.join(f'{t:.1f}' for t in bf16[:3])} ms, "
              f"fp32 {'/'.join(f'{t:.1f}' for t in fp32[:3])} ms")
    assert choice.reason.endswith(decode), choice.reason


@pytest.mark.parametrize(("bf16_kernels", "want"), [
    (("int4-panels", "int8-wo-panels-split"), "bfloat16"),  # the same int8 arithmetic
    (("int4-panels", "int8-wo"), "float32"),  # another kernel: the timings decide
])
def test_the_same_int8_kernels_in_both_dtypes_take_bf16(
        tiny_models: dict[str, Path], monkeypatch, bf16_kernels: tuple[str, ...],
        want: str) -> None:
    monkeypatch.setattr(dtype_choice, "bf16_fast", lambda: True)
    int8 = ("int4-panels", "int8-wo-panels-split")
    timed = {"float32": ((1e-3,) * 5, "measured", int8),  # fp32 20% ahead, by noise
             "bfloat16": ((1.2e-3,) * 5, "measured",
                          bf16_kernels if bf16_kernels == int8 else None)}
    monkeypatch.setattr(dtype_choice, "_time_both", lambda *args, **kwargs: timed)
    cfg = model_sized(ModelConfig.from_dir(tiny_models["llama"]))
    choice = choose_dtype(cfg, CPU, "int4")
    assert choice.dtype == want
    assert ("the same kernels in both dtypes" in choice.reason) == (want == "bfloat16")


def test_a_step_counts_each_layer_per_layer_and_a_trimmed_one_at_its_width(
        tiny_models: dict[str, Path], monkeypatch) -> None:
    from minisgl_core.kernels import BUCKETS
    from minisgl_core.kernels import choice as kernel_choice

    cfg = model_sized(ModelConfig.from_dir(tiny_models["llama"]))
    shapes = dtype_choice.model_shapes(cfg)
    assert shapes["gate_up"] == (3072, 576) and shapes["down"] == (576, 1536)
    monkeypatch.setattr(kernel_choice, "MAX_WEIGHTS", 1536 * 576)  # gate|up: half its rows
    widths = {role: kernel_choice.timed_width(*shape) for role, shape in shapes.items()}
    assert widths["gate_up"] == 1536
    assert all(widths[role] == shape[0] for role, shape in shapes.items() if role != "gate_up")

    def measured(shapes_: dict, *args, **kwargs) -> kernel_choice.Choice:
        ms = {role: (1e-3 if role == "lm_head" else 2e-3,) * len(BUCKETS) for role in shapes_}
        return kernel_choice.Choice({}, "measured in 0.1 s", ms)

    monkeypatch.setattr(kernel_choice, "choose", measured)
    timed = dtype_choice._time_both(cfg, shapes, set(), CPU, "int4", None, 1.0, False)
    assert timed is not None
    # q/k/v, o and down once a layer, gate|up twice (timed on half its rows), the head once
    step = (3 + 2) * cfg.num_layers * 2e-3 + 1e-3
    for seconds, how, _ in timed.values():
        assert how == "measured"
        assert seconds == pytest.approx((step,) * len(BUCKETS))
