"""The weight-only GEMM on AVX512-BF16 (csrc/avx512/wo_gemm_bf16.c): against the float64 product
of the dequantized weight, its fused residual, the Kernel around it and the kernel choice."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels.matmul.choice import candidates
from minisgl_core.kernels.matmul.w8a8 import quantize_weight
from minisgl_core.kernels.matmul.weight_only import (
    Int4Weight,
    Int8Weight,
    dequantize_int4,
    dequantize_int8,
    quantize_int4,
)
from minisgl_core.kernels.matmul.wo_gemm import WeightOnlyGemm, gemm_matmul

SCHEMES = ("int8-wo", "int4")
CPU = torch.device("cpu")
HERE = WeightOnlyGemm("int4").available(CPU, torch.bfloat16)
needs_bf16 = pytest.mark.skipif(not HERE, reason="no AVX512-BF16 here (or no native library)")
# (out, in): the default model's q/k/v, gate/up and down, and odd widths: outputs that fill no
# 16-wide vector or 48-wide panel, a partial int4 group, an odd input count (its last pair half
# padding), a single group and less
SHAPES = [(960, 576), (3072, 576), (576, 1536), (37, 100), (49, 31), (5, 33), (23, 300),
          (100, 17)]
ROWS = (1, 2, 3, 8, 17, 33, 64, 65)  # within an 8-row block, past it, several and their rest


def _packed(scheme: str, w: torch.Tensor) -> Int8Weight | Int4Weight:
    return quantize_int4(w) if scheme == "int4" else Int8Weight(*quantize_weight(w))


def _weight(scheme: str, packed: Int8Weight | Int4Weight) -> torch.Tensor:
    """The weight the kernel multiplies by, exactly: int4's nib * scale + min (its 1 + nib / 16
    is exact in bf16, scale and min apply in fp32), int8's integers (exact in bf16) times the
    row's scale."""
    if isinstance(packed, Int4Weight):
        return dequantize_int4(packed)
    return dequantize_int8(packed)


@needs_bf16
@pytest.mark.parametrize("scheme", SCHEMES)
def test_gemm_equals_the_dequantized_product(scheme: str) -> None:
    gen = torch.Generator().manual_seed(7)
    for out, inp in SHAPES:
        packed = _packed(scheme, torch.randn(out, inp, generator=gen) * 0.05)
        ref_w = _weight(scheme, packed).double()
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).bfloat16()
            ref = x.double() @ ref_w.t()
            y = gemm_matmul(x, packed)
            assert y is not None and y.shape == (rows, out) and y.dtype == torch.float32
            err = float((y - ref).abs().max() / ref.abs().max())
            assert err < 1e-5, (out, inp, rows, err)
            res = torch.randn(rows, out, generator=gen).bfloat16()
            fused = gemm_matmul(x, packed, res, torch.bfloat16)
            assert fused is not None and fused.dtype == torch.bfloat16
            # the fp32 sum rounded once to bf16
            assert torch.equal(fused, (y + res.float()).bfloat16()), (out, inp, rows)


@needs_bf16
@pytest.mark.parametrize("scheme", SCHEMES)
def test_gemm_kernel_adds_bias_and_residual(scheme: str) -> None:
    gen = torch.Generator().manual_seed(8)
    kernel = WeightOnlyGemm(scheme)
    packed = kernel.pack(torch.randn(37, 100, generator=gen))
    x, bias, res = (torch.randn(*s, generator=gen).bfloat16() for s in ((9, 100), (37,), (9, 37)))
    plain = x.float() @ _weight(scheme, packed).t()
    for b in (None, bias):
        y = kernel.run(packed, x, b, res)
        ref = plain + res.float() + (0 if b is None else b.float())
        assert y.dtype == torch.bfloat16 and y.shape == (9, 37)
        assert float((y.float() - ref).abs().max() / ref.abs().max()) < 1e-2  # bf16 output


def test_gemm_is_offered_only_for_bf16_where_the_cpu_has_it() -> None:
    for scheme in SCHEMES:
        kernel = WeightOnlyGemm(scheme)
        assert not kernel.available(CPU, torch.float32)  # fp32 inputs are never rounded
        assert kernel.available(CPU, torch.bfloat16) == HERE
        names = {k.name for k in candidates("gate_up", CPU, torch.bfloat16, scheme)}
        assert (f"{scheme}-gemm" in names) == HERE
        assert f"{scheme}-gemm" not in {k.name for k in
                                          candidates("gate_up", CPU, torch.float32, scheme)}
    if not HERE:  # the C entry points say no rather than run an instruction the CPU lacks
        packed = quantize_int4(torch.randn(16, 64))
        assert gemm_matmul(torch.randn(3, 64).bfloat16(), packed) is None

