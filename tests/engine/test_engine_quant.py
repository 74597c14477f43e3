"""--quantization int8: the engine's int8 path equals its own reference math on a tiny model."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.kernels import Linear, bucket_of
from minisgl_core.kernels.matmul.choice import candidates
from minisgl_core.kernels.matmul.w8a8 import int8_kernels, quantize_weight
from minisgl_core.plugin.model_lookup import resolve
from minisgl_core.wire.schema import SamplingParams

PROMPTS = [[5, 9, 13, 2, 7, 30, 11], [3, 4], [8, 1, 6, 21, 17]]


class _Checked:
    """An int8 Linear of the engine, run as is, its every output compared with the reference
    math (quantize the fp32 checkpoint weight and the input, dequantize, matmul in fp32)."""

    def __init__(self, int8: Linear, weight: torch.Tensor, log: list[tuple[int, float, float]]
                 ) -> None:
        self.int8, self.log = int8, log
        self.q, self.scale = quantize_weight(weight)
        self.weight = weight

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        y = self.int8(x, residual)
        kernel = self.int8.kernels[bucket_of(x.shape[0])]  # the kernel the engine ran
        ref = kernel.reference(self.q, self.scale, x)
        extra = (0 if self.int8.bias is None else self.int8.bias) + \
            (0 if residual is None else residual)
        size = float(ref.abs().max())
        self.log.append((x.shape[0], float((y - ref - extra).abs().max()) / size,
                         float((y - x @ self.weight.t() - extra).abs().max()) / size))
        return y


def _run(engine: Engine) -> None:
    for i, p in enumerate(PROMPTS):  # the last one decodes alone at the end: one-row steps
        sp = SamplingParams(max_tokens=4 + 4 * i, temperature=0.0, ignore_eos=True)
        engine.add_request(f"r{i}", p, sp)
    for _ in range(100):
        if not engine.has_work():
            break
        engine.step()
    assert not engine.has_work()


@pytest.mark.parametrize("kernel", [k.name for k in int8_kernels()])
def test_int8_engine_equals_its_reference_math(tiny_models, monkeypatch, kernel: str) -> None:
    if not next(k for k in int8_kernels() if k.name == kernel).available(
            torch.device("cpu"), torch.float32):  # its self-check failed: never a candidate
        pytest.skip(f"{kernel} does not run right on this host (or this MINISGL_CPU_FEATURES)")
    model = str(tiny_models["qwen2"])  # q/k/v biases: the bias path is covered too
    monkeypatch.setenv("MINISGL_LINEAR", kernel)
    cls = resolve(model).model_class
    quant = Engine(EngineConfig(model=model, num_threads=1, cache="naive",
                                quantization="int8"), cls)
    assert quant.model.describe()["quantization"] == "int8"
    monkeypatch.setenv("MINISGL_LINEAR", "dense")  # dense keeps the fp32 weight as [in, out]
    fp32 = Engine(EngineConfig(model=model, num_threads=1, cache="naive"), cls)
    log: list[tuple[int, float, float]] = []
    for layer, qlayer in zip(fp32.model.layers, quant.model.layers, strict=True):
        assert not qlayer.qkv.kernels[0].quantized  # kept fp32 (quant.FP32_ROLES)
        for name in ("o", "gate_up", "down"):
            assert getattr(qlayer, name).kernels[0].name == kernel
            setattr(qlayer, name, _Checked(getattr(qlayer, name),
                                           getattr(layer, name).weight.t(), log))
    _run(quant)
    rows = {r for r, _, _ in log}
    assert 1 in rows and max(rows) > 1  # decode steps of one row, prefill and batched rows
    assert max(err for _, err, _ in log) < 1e-5
    # the reference is int8 math, not fp32's: the fp32 product is measurably elsewhere
    assert min(off for _, _, off in log) > 1e-4


def test_int8_weights_take_a_quarter_of_fp32s(tiny_models, monkeypatch) -> None:
    monkeypatch.setenv("MINISGL_LINEAR", "int8")
    model = str(tiny_models["llama"])
    quant = Engine(EngineConfig(model=model, num_threads=1, quantization="int8"),
                   resolve(model).model_class)
    layer = quant.model.layers[0]
    fp32_bytes = layer.gate_up.in_features * layer.gate_up.out_features * 4
    assert layer.gate_up.nbytes() < fp32_bytes / 3
    assert quant.model.lm_head is not None and not quant.model.lm_head.kernels[0].quantized


def test_int8_without_an_int8_kernel_fails_at_start_with_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="needs an int8 matmul kernel"):
        candidates("down", torch.device("meta"), torch.float32, "int8")


def test_unknown_quantization_is_refused() -> None:
    with pytest.raises(ValueError, match="quantization"):
        EngineConfig(model="x", quantization="int2")


def test_int8_with_two_tensor_parallel_ranks(tiny_models) -> None:
    from minisgl_core import LLM

    opts = {"page_size": 4, "num_pages": 64, "num_threads": 1, "quantization": "int8"}
    greedy = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    with LLM(str(tiny_models["llama"]), tp=2, **opts) as two:
        assert two.engine.model.describe()["quantization"] == "int8"
        assert two.engine.model.layers[0].down.kernels[0].quantized  # rank 0's shard
        assert two._group is not None
        followers = two._group.followers
        outs = two.generate(["Hello world", "你好"], greedy)
    assert [len(o.token_ids) for o in outs] == [8, 8]
    assert [p.returncode for p in followers] == [0]  # each rank quantized its shard and ran
