"""``--dtype auto``: bf16 only where it measures faster, fp32 elsewhere; the same for a cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl_core.engine import dtype_choice
from minisgl_core.engine.config import EngineConfig, ModelConfig
from minisgl_core.engine.dtype_choice import choose_dtype, resolve
from minisgl_core.engine.linear import bf16_fast

CPU = torch.device("cpu")


def test_auto_is_the_same_choice_for_a_given_cache(tiny_models: dict[str, Path], tmp_path: Path,
                                                    monkeypatch) -> None:
    monkeypatch.delenv("MINISGL_LINEAR", raising=False)
    cfg = ModelConfig.from_dir(tiny_models["llama"])
    # a budget a busy host cannot run out of: a partial measurement is not cached
    first = choose_dtype(cfg, CPU, cache=tmp_path, budget_s=120.0)
    assert first.dtype in ("float32", "bfloat16") and "not measured" not in first.reason
    cached = list(tmp_path.glob("linear-*.json"))
    again = choose_dtype(cfg, CPU, cache=tmp_path)
    assert again == first and list(tmp_path.glob("linear-*.json")) == cached
    if not bf16_fast():  # an AVX2-only host: bf16 is emulated there, never timed nor chosen
        assert first.dtype == "float32" and not cached


def test_bf16_is_never_chosen_where_the_cpu_would_emulate_it(tiny_models: dict[str, Path],
                                                             tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dtype_choice, "bf16_fast", lambda: False)  # as on an AVX2-only CPU
    cfg = ModelConfig.from_dir(tiny_models["llama"])
    choice = choose_dtype(cfg, CPU, cache=tmp_path)
    assert choice.dtype == "float32" and "AVX512-BF16" in choice.reason


def test_int8_auto_runs_in_fp32(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    cfg = ModelConfig.from_dir(tiny_models["llama"])
    choice = choose_dtype(cfg, CPU, "int8", cache=tmp_path)
    assert choice == dtype_choice.DtypeChoice("float32", "--quantization int8 runs in fp32")
    assert not list(tmp_path.glob("linear-*.json"))  # decided without timing anything


@pytest.mark.skipif(not dtype_choice.bf16_fast(), reason="bf16 is not a candidate here")
@pytest.mark.parametrize("quantization", ["int8-wo", "int4"])
def test_weight_only_auto_times_its_own_kernels(tiny_models: dict[str, Path], tmp_path: Path,
                                                quantization: str) -> None:
    cfg = ModelConfig.from_dir(tiny_models["llama"])
    choice = choose_dtype(cfg, CPU, quantization, cache=tmp_path, budget_s=60.0)
    assert choice.dtype in ("float32", "bfloat16")
    assert choice.reason.startswith(f"{quantization} gate|up layer at 1/8/32 rows")
    timed = [json.loads(p.read_text()) for p in tmp_path.glob("linear-*.json")]
    assert sorted(t["key"]["dtype"] for t in timed) == ["torch.bfloat16", "torch.float32"]
    weight_only = (quantization, f"{quantization}-amx", f"{quantization}-dequant")
    assert all(t["choice"]["gate_up"][0] in weight_only
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
