"""int4 weights against int8 inputs (csrc/avx512/wo_int4_q8.c, AVX2 or AVX512-VNNI): against the
float64 product of the dequantized weight and the rounded inputs, the rounding's size against
the inputs themselves, its fused residual, the Kernel around it and the kernel choice."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels.matmul.choice import candidates
from minisgl_core.kernels.matmul.weight_only import dequantize_int4, quantize_int4
from minisgl_core.kernels.matmul.wo_q8 import WeightOnlyQ8, q8_matmul, q8_rows

CPU = torch.device("cpu")
HERE = WeightOnlyQ8().available(CPU, torch.float32)
GEMM_HERE = WeightOnlyQ8(gemm=True).available(CPU, torch.float32)  # AVX512-VNNI only
needs_q8 = pytest.mark.skipif(not HERE, reason="no AVX2 here (or no native library)")
# (the dot-product kernel, the GEMM): each where this CPU runs it
KERNELS = [pytest.param(False, id="dot"),
           pytest.param(True, id="gemm", marks=pytest.mark.skipif(
               not GEMM_HERE, reason="no AVX512-VNNI here (or no native library)"))]
# (out, in): the default model's q/k/v, gate/up and down, and odd widths: a partial int4 group,
# a block of fewer than four groups, a single group and less
SHAPES = [(960, 576), (3072, 576), (576, 1536), (37, 100), (49, 31), (5, 33), (23, 300),
          (100, 17)]
ROWS = (1, 2, 3, 8, 17, 33, 64, 65)  # within a 4-row tile, past it, several and their rest


@needs_q8
@pytest.mark.parametrize("gemm", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q8_equals_the_product_of_the_rounded_inputs(dtype: torch.dtype, gemm: bool) -> None:
    gen = torch.Generator().manual_seed(7)
    for out, inp in SHAPES:
        packed = quantize_int4(torch.randn(out, inp, generator=gen) * 0.05)
        ref_w = dequantize_int4(packed).double()
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).to(dtype)
            ref = q8_rows(x).double() @ ref_w.t()
            y = q8_matmul(x, packed, gemm=gemm)
            assert y is not None and y.shape == (rows, out) and y.dtype == torch.float32
            err = float((y - ref).abs().max() / ref.abs().max())
            assert err < 1e-5, (out, inp, rows, err)
            # the inputs' rounding: at most half a step of 1/127 of each group's largest
            exact = x.double() @ ref_w.t()
            assert float((y - exact).abs().max() / exact.abs().max()) < 0.02, (out, inp, rows)
            res = torch.randn(rows, out, generator=gen).to(dtype)
            fused = q8_matmul(x, packed, res, dtype, gemm=gemm)
            assert fused is not None and fused.dtype == dtype
            assert torch.equal(fused, (y + res.float()).to(dtype)), (out, inp, rows)


def test_q8_rounds_each_group_of_inputs_to_127_steps() -> None:
    x = torch.tensor([[1.0, -0.5, 0.25] + [0.0] * 29 + [127.0, 63.4, -63.6, 62.5] + [0.0] * 4])
    got = q8_rows(x)
    assert got.shape == x.shape
    # -0.5 is -63.5 steps of 1/127 and 62.5 is 62.5 of 1: ties go to the even step
    want = torch.tensor([127 / 127, -64 / 127, 32 / 127, 127.0, 63.0, -64.0, 62.0])
    assert torch.allclose(got[0, [0, 1, 2, 32, 33, 34, 35]], want, rtol=1e-6, atol=0)
    assert torch.equal(q8_rows(torch.zeros(2, 40)), torch.zeros(2, 40))  # no step: all zeros


@needs_q8
@pytest.mark.parametrize("gemm", KERNELS)
def test_q8_kernel_adds_bias_and_residual(gemm: bool) -> None:
    gen = torch.Generator().manual_seed(8)
    kernel = WeightOnlyQ8(gemm=gemm)
    packed = kernel.pack(torch.randn(37, 100, generator=gen))
    x, bias, res = (torch.randn(*s, generator=gen).bfloat16() for s in ((9, 100), (37,), (9, 37)))
    plain = q8_rows(x) @ dequantize_int4(packed).t()
    for b in (None, bias):
        y = kernel.run(packed, x, b, res)
        ref = plain + res.float() + (0 if b is None else b.float())
        assert y.dtype == torch.bfloat16 and y.shape == (9, 37)
        assert float((y.float() - ref).abs().max() / ref.abs().max()) < 1e-2  # bf16 output


def test_q8_is_offered_only_where_the_cpu_runs_it() -> None:
    for dtype in (torch.float32, torch.bfloat16):
        names = {k.name for k in candidates("gate_up", CPU, dtype, "int4")}
        assert WeightOnlyQ8().available(CPU, dtype) == HERE == ("int4-q8" in names)
        assert WeightOnlyQ8(gemm=True).available(CPU, dtype) == GEMM_HERE
        assert ("int4-q8-gemm" in names) == GEMM_HERE
    assert not {"int4-q8", "int4-q8-gemm"} & {
        k.name for k in candidates("gate_up", CPU, torch.float32, "int8-wo")}
    assert GEMM_HERE <= HERE  # AVX512-VNNI implies AVX2
    packed = quantize_int4(torch.randn(16, 64))
    for gemm, here in ((False, HERE), (True, GEMM_HERE)):
        if not here:  # the C entry point says no rather than run an instruction the CPU lacks
            assert q8_matmul(torch.randn(3, 64), packed, gemm=gemm) is None
    assert not WeightOnlyQ8(gemm=True).serves(2) and WeightOnlyQ8(gemm=True).serves(3)

