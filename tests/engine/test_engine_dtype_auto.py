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
            slow = {k: [t * 1000 for t in ts] for k, ts in body["seconds"]["gate_up"].items()}
            path.write_text(json.dumps({**body, "seconds": {"gate_up": slow}}))
    assert slow is not None
    again = choose_dtype(cfg, CPU, cache=tmp_path, budget_s=120.0)
    assert "cached" not in again.reason, again.reason  # both timed anew, not read back
    bodies = [json.loads(p.read_text()) for p in tmp_path.glob("linear-*.json")]
    fp32_times = [b["seconds"]["gate_up"] for b in bodies if b["key"]["dtype"] == "torch.float32"]
    assert fp32_times and fp32_times[0] != slow  # the inflated file was replaced


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
    assert choice.reason.startswith(f"{quantization} gate|up layer [3072x576] at 1/8/32 rows")
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
