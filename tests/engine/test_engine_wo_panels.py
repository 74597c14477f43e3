"""An engine whose int4 layers run in 16-output panels on int8 inputs (csrc/avx512/wo_panels.c):
it generates, and a layer through the C++ operator gives the rounded inputs' product."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.kernels.matmul.weight_only import dequantize_int4
from minisgl_core.kernels.matmul.wo_panels import WeightOnlyPanels, from_panels, q8_rows
from minisgl_core.plugin.model_lookup import resolve
from minisgl_core.wire.schema import SamplingParams


@pytest.mark.skipif(not WeightOnlyPanels().available(torch.device("cpu"), torch.float32),
                    reason="no AVX2 here (or no native library)")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_engine_generates_on_int4_panels(tiny_models, monkeypatch, dtype: str) -> None:
    kernel = "int4-panels"
    model = resolve(str(tiny_models["llama"]))
    monkeypatch.setenv("MINISGL_LINEAR", kernel)  # every bucket of every int4 layer
    engine = Engine(EngineConfig(model=model.path, num_threads=1, quantization="int4",
                                 dtype=dtype), model.model_class)
    down = engine.model.layers[0].down
    assert {k.name for k in down.kernels} == {kernel}
    sp = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    for i, prompt in enumerate([[5, 9, 13, 2, 7], [3, 4], [8, 1, 6]]):
        engine.add_request(f"r{i}", prompt, sp)
    out: dict[str, list[int]] = {}
    for _ in range(40):  # bounded: 4 tokens each need a few steps
        if not engine.has_work():
            break
        for step in engine.step():
            out.setdefault(step.request_id, []).extend(step.token_ids)
    assert not engine.has_work() and sorted(map(len, out.values())) == [4, 4, 4]
    # the layer (through the C++ operator where it is built) against the rounded inputs' product
    x = torch.randn(5, down.in_features, generator=torch.Generator().manual_seed(9))
    x = x.to(getattr(torch, dtype))
    ref = q8_rows(x).double() @ dequantize_int4(from_panels(down.weight)).double().t()
    y = down(x)
    assert y.dtype == x.dtype
    assert float((y.double() - ref).abs().max() / ref.abs().max()) < 1e-2
