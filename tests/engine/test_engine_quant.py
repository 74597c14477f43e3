"""--quantization int8: the engine's int8 path equals its own reference math on a tiny model."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.engine.kernel_choice import candidates
from minisgl_core.engine.linear import Linear, bucket_of
from minisgl_core.engine.quant import int8_kernels, quantize_weight
from minisgl_core.messages import SamplingParams

PROMPTS = [[5, 9, 13, 2, 7, 30, 11], [3, 4], [8, 1, 6, 21, 17]]


class _Reference:
    """A dense fp32 Linear replaced by what an int8 kernel computes, spelled out in fp32."""

    def __init__(self, dense: Linear, int8: Linear) -> None:
        self.q, self.scale = quantize_weight(dense.weight.t())  # dense keeps [in, out]
        self.bias, self.int8 = dense.bias, int8

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        kernel = self.int8.kernels[bucket_of(x.shape[0])]  # the kernel the engine runs here
        y = kernel.reference(self.q, self.scale, x)
        y = y if self.bias is None else y + self.bias
        return y if residual is None else y + residual


def _greedy(engine: Engine) -> dict[str, Any]:
    sp = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, logprobs=4)
    for i, p in enumerate(PROMPTS):
        engine.add_request(f"r{i}", p, sp)
    tokens: dict[str, list[int]] = {}
    logprobs: dict[str, list[float]] = {}
    for _ in range(100):
        if not engine.has_work():
            break
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.token_ids)
            for lp in out.logprobs:
                logprobs.setdefault(out.request_id, []).extend(v for _, v in lp.top)
    assert not engine.has_work()
    return {"tokens": tokens, "logprobs": logprobs}


@pytest.mark.parametrize("kernel", [k.name for k in int8_kernels()])
def test_int8_engine_equals_its_reference_math(tiny_models, monkeypatch, kernel: str) -> None:
    model = str(tiny_models["qwen2"])  # q/k/v biases: the bias path is covered too
    monkeypatch.setenv("MINISGL_LINEAR", kernel)
    quant = Engine(EngineConfig(model=model, num_threads=1, cache="naive",
                                quantization="int8"))
    assert quant.model.describe()["quantization"] == "int8"
    monkeypatch.setenv("MINISGL_LINEAR", "dense")
    fp32 = Engine(EngineConfig(model=model, num_threads=1, cache="naive"))
    ref = Engine(EngineConfig(model=model, num_threads=1, cache="naive"))
    for layer, qlayer in zip(ref.model.layers, quant.model.layers, strict=True):
        for name in ("qkv", "o", "gate_up", "down"):
            assert getattr(qlayer, name).kernels[0].name == kernel
            setattr(layer, name, _Reference(getattr(layer, name), getattr(qlayer, name)))
    got, want, plain = _greedy(quant), _greedy(ref), _greedy(fp32)
    assert got["tokens"] == want["tokens"]
    for rid, lps in want["logprobs"].items():
        assert got["logprobs"][rid] == pytest.approx(lps, abs=1e-4)
    # the reference is int8 math, not fp32's: the unquantized engine is measurably elsewhere
    drift = max(abs(a - b) for rid, lps in plain["logprobs"].items()
                for a, b in zip(lps, want["logprobs"][rid], strict=True))
    assert drift > 1e-3


def test_int8_weights_take_a_quarter_of_fp32s(tiny_models, monkeypatch) -> None:
    monkeypatch.setenv("MINISGL_LINEAR", "int8")
    quant = Engine(EngineConfig(model=str(tiny_models["llama"]), num_threads=1,
                                quantization="int8"))
    layer = quant.model.layers[0]
    fp32_bytes = layer.gate_up.in_features * layer.gate_up.out_features * 4
    assert layer.gate_up.nbytes() < fp32_bytes / 3
    assert quant.model.lm_head is not None and not quant.model.lm_head.kernels[0].quantized


def test_int8_without_an_int8_kernel_fails_at_start_with_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="needs an int8 matmul kernel"):
        candidates("qkv", torch.device("meta"), torch.float32, "int8")


def test_unknown_quantization_is_refused() -> None:
    with pytest.raises(ValueError, match="quantization"):
        EngineConfig(model="x", quantization="int4")
