"""The LM head's logits in fp32 where every kernel of it takes fp32 rows at no cost
(``Linear.fp32_rows``): a bf16 engine's logits are then the head's own fp32 sums over the fp32
norm of the rows, not bf16 roundings of them; a head with a bf16-only kernel keeps bf16 logits."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels.linear import Linear
from minisgl_core.kernels.matmul.weight_only import Int8Weight, dequantize_int8
from minisgl_core.kernels.native import library as native

needs_native = pytest.mark.skipif(native.library() is None,
                                  reason=f"no native library: {native.failure()}")


@pytest.mark.parametrize(("kernel", "fp32"), [
    ("int8-wo", True), ("int8-wo-panels", True), ("int8-wo-panels-split", True),
    ("int4-panels", True), ("int4", False), ("int8-wo-gemm", False), ("int8-wo-dequant", False),
    ("int4-panels-dequant", False), ("dense", False)])
def test_which_kernels_take_fp32_rows(kernel: str, fp32: bool) -> None:
    w = torch.randn(40, 64, generator=torch.Generator().manual_seed(1))
    assert Linear(w, None, kernel).fp32_rows is fp32


@needs_native
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_a_bf16_engine_on_an_int8_head_gives_the_heads_fp32_sums(make_engine, monkeypatch,
                                                                   arch: str) -> None:
    monkeypatch.setenv("MINISGL_LINEAR", "int8-wo")  # converts bf16 rows to fp32 anyway
    model = make_engine(arch, quantization="int8-wo", dtype="bfloat16").model
    head = model.lm_head
    assert {k.name for k in head.kernels} == {"int8-wo"} and head.fp32_rows
    gen = torch.Generator().manual_seed(5)
    hidden = torch.randn(3, head.in_features, generator=gen).bfloat16()
    with torch.inference_mode():
        logits = model.logits(hidden)
    assert logits.dtype == torch.float32 and logits.shape == (3, head.out_features)
    # the exact product of the fp32 norm of the rows and the dequantized head
    x = hidden.double()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + model.cfg.rms_norm_eps)
    assert isinstance(head.weight, Int8Weight)
    want = (normed * model.norm.double()) @ dequantize_int8(head.weight).double().t()
    assert float((logits.double() - want).abs().max() / want.abs().max()) < 1e-5
    # not bf16 values: bf16 keeps 8 bits of each, fp32 the head's sums
    assert not torch.equal(logits, logits.bfloat16().float())


@needs_native
def test_a_head_with_a_bf16_only_kernel_keeps_bf16_logits(make_engine, monkeypatch) -> None:
    monkeypatch.setenv("MINISGL_LINEAR", "int8-wo-dequant")
    model = make_engine("llama", quantization="int8-wo", dtype="bfloat16").model
    assert model.lm_head is not None and not model.lm_head.fp32_rows
    hidden = torch.randn(2, model.lm_head.in_features).bfloat16()
    with torch.inference_mode():
        assert model.logits(hidden).dtype == torch.bfloat16
