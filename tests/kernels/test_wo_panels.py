"""Weights in 16-output panels against int8 inputs (csrc/avx512/wo_panels.c): int4's on AVX2 or
AVX512-VNNI, int8's on AVX512-VNNI, against the float64 product of the dequantized weight and
the rounded inputs; the rounding's size against the inputs themselves, the fused residual, the
Kernels around them and the kernel choice."""

from __future__ import annotations

import platform
import shutil
import subprocess
from collections.abc import Callable

import pytest
import torch

from minisgl_core.kernels.matmul.choice import candidates, choose
from minisgl_core.kernels.matmul.w8a8 import quantize_weight
from minisgl_core.kernels.matmul.weight_only import (
    Int4Weight,
    Int8Weight,
    dequantize_int4,
    dequantize_int8,
    quantize_int4,
)
from minisgl_core.kernels.matmul.wo_panels import (
    WeightOnlyPanels,
    from_panels,
    int8_panel_rows,
    int8_to_panels,
    panels_matmul,
    q8_rows,
    to_panels,
    unpanel,
)
from minisgl_core.kernels.native import library

CPU = torch.device("cpu")
PANELS_HERE = WeightOnlyPanels().available(CPU, torch.float32)  # AVX2 or AVX512-VNNI
INT8_PANELS_HERE = WeightOnlyPanels("int8-wo").available(CPU, torch.float32)  # AVX512-VNNI
# (out, in): the default model's q/k/v, gate/up and down, and odd widths: outputs that fill no
# 16-output panel, a partial int4 group, a block of fewer than four groups, one group and less
SHAPES = [(960, 576), (3072, 576), (576, 1536), (37, 100), (49, 31), (5, 33), (23, 300),
          (100, 17)]
ROWS = (1, 2, 3, 8, 17, 33, 64, 65)  # within a 4- or 8-row block, past it, several, their rest


def _panels(x: torch.Tensor, w: Int4Weight | Int8Weight, residual: torch.Tensor | None = None,
            dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    packed = to_panels(w) if isinstance(w, Int4Weight) else int8_to_panels(w)
    return panels_matmul(x, packed, residual, dtype)


def _int8(w: torch.Tensor) -> Int8Weight:
    return Int8Weight(*quantize_weight(w))


needs_panels = pytest.mark.skipif(not PANELS_HERE, reason="no AVX2 (or no native library)")
needs_vnni = pytest.mark.skipif(not INT8_PANELS_HERE,
                                reason="no AVX512-VNNI (or no native library)")
# how each scheme's weight is made
KERNELS = [pytest.param(quantize_int4, id="int4-panels", marks=needs_panels),
           pytest.param(_int8, id="int8-wo-panels", marks=needs_vnni)]


@pytest.mark.parametrize("quantize", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_panels_equal_the_product_of_the_rounded_inputs(
        dtype: torch.dtype, quantize: Callable[[torch.Tensor], object]) -> None:
    gen = torch.Generator().manual_seed(7)
    for out, inp in SHAPES:
        packed = quantize(torch.randn(out, inp, generator=gen) * 0.05)
        ref_w = (dequantize_int4(packed) if isinstance(packed, Int4Weight)
                 else dequantize_int8(packed)).double()
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).to(dtype)
            ref = q8_rows(x).double() @ ref_w.t()
            y = _panels(x, packed)
            assert y is not None and y.shape == (rows, out) and y.dtype == torch.float32
            err = float((y - ref).abs().max() / ref.abs().max())
            assert err < 1e-5, (out, inp, rows, err)
            # the inputs' rounding: at most half a step of 1/127 of each group's largest
            exact = x.double() @ ref_w.t()
            assert float((y - exact).abs().max() / exact.abs().max()) < 0.02, (out, inp, rows)
            res = torch.randn(rows, out, generator=gen).to(dtype)
            fused = _panels(x, packed, res, dtype)
            assert fused is not None and fused.dtype == dtype
            assert torch.equal(fused, (y + res.float()).to(dtype)), (out, inp, rows)
            alone = _panels(x, packed, None, dtype)
            assert alone is not None and torch.equal(alone, y.to(dtype)), (out, inp, rows)


@pytest.mark.parametrize("quantize", KERNELS)
def test_panels_keep_infinities_and_nans_of_the_residual_in_bf16(
        quantize: Callable[[torch.Tensor], object]) -> None:
    gen = torch.Generator().manual_seed(9)
    packed = quantize(torch.randn(37, 100, generator=gen) * 0.05)
    x = torch.randn(3, 100, generator=gen).bfloat16()
    res = torch.randn(3, 37, generator=gen).bfloat16()
    res[0, 5], res[1, 20], res[2, 36] = float("inf"), float("-inf"), float("nan")
    y = _panels(x, packed, res, torch.bfloat16)
    assert y is not None
    assert y[0, 5] == float("inf") and y[1, 20] == float("-inf") and bool(y[2, 36].isnan())
    assert int(torch.isfinite(y).sum()) == y.numel() - 3


def test_q8_rounds_each_group_of_inputs_to_127_steps() -> None:
    x = torch.tensor([[1.0, -0.5, 0.25] + [0.0] * 29 + [127.0, 63.4, -63.6, 62.5] + [0.0] * 4])
    got = q8_rows(x)
    assert got.shape == x.shape
    # -0.5 is -63.5 steps of 1/127 and 62.5 is 62.5 of 1: ties go to the even step
    want = torch.tensor([127 / 127, -64 / 127, 32 / 127, 127.0, 63.0, -64.0, 62.0])
    assert torch.allclose(got[0, [0, 1, 2, 32, 33, 34, 35]], want, rtol=1e-6, atol=0)
    assert torch.equal(q8_rows(torch.zeros(2, 40)), torch.zeros(2, 40))  # no step: all zeros


def test_panels_hold_the_weight_unchanged() -> None:
    for out, inp in ((37, 100), (16, 64), (5, 33)):
        weight = torch.randn(out, inp, generator=torch.Generator().manual_seed(out))
        w = quantize_int4(weight)
        p = to_panels(w)
        assert p.q.shape == (-(-out // 16), -(-inp // 32), 4, 16, 4) and p.out_features == out
        back = from_panels(p)
        assert all(torch.equal(getattr(back, n), getattr(w, n)) for n in ("q", "scale", "min"))
        kernel = WeightOnlyPanels()
        padded = -(-out // 16) * 16 - out  # zero outputs fill the last panel
        assert kernel.nbytes(p) == kernel.nbytes(w) * (out + padded) // out
        w8 = _int8(weight)
        p8 = int8_to_panels(w8)
        assert p8.q.shape == (-(-out // 16), -(-inp // 32) * 8, 16, 4)
        back8 = unpanel(p8)
        assert torch.equal(back8.q, w8.q) and torch.equal(back8.scale, w8.scale)


@pytest.mark.parametrize("kernel", [
    pytest.param(WeightOnlyPanels(), id="int4-panels", marks=needs_panels),
    pytest.param(WeightOnlyPanels("int8-wo"), id="int8-wo-panels", marks=needs_vnni)])
def test_panel_kernels_add_bias_and_residual(kernel: WeightOnlyPanels) -> None:
    gen = torch.Generator().manual_seed(8)
    packed = kernel.pack(torch.randn(37, 100, generator=gen))
    w = unpanel(packed)
    x, bias, res = (torch.randn(*s, generator=gen).bfloat16() for s in ((9, 100), (37,), (9, 37)))
    deq = dequantize_int4(w) if isinstance(w, Int4Weight) else dequantize_int8(w)
    plain = q8_rows(x) @ deq.t()
    for b in (None, bias):
        y = kernel.run(packed, x, b, res)
        ref = plain + res.float() + (0 if b is None else b.float())
        assert y.dtype == torch.bfloat16 and y.shape == (9, 37)
        assert float((y.float() - ref).abs().max() / ref.abs().max()) < 1e-2  # bf16 output


def test_panel_kernels_are_offered_only_where_the_cpu_runs_them() -> None:
    for dtype in (torch.float32, torch.bfloat16):
        names = {k.name for k in candidates("gate_up", CPU, dtype, "int4")}
        assert WeightOnlyPanels().available(CPU, dtype) == PANELS_HERE
        assert ("int4-panels" in names) == PANELS_HERE
        int8_names = {k.name for k in candidates("gate_up", CPU, dtype, "int8-wo")}
        assert ("int8-wo-panels" in int8_names) == INT8_PANELS_HERE
        assert "int4-panels" not in int8_names
    assert INT8_PANELS_HERE <= PANELS_HERE  # AVX512-VNNI implies AVX2
    for weight, here in ((quantize_int4(torch.randn(16, 64)), PANELS_HERE),
                         (_int8(torch.randn(16, 64)), INT8_PANELS_HERE)):
        if not here:  # the C entry point says no rather than run an instruction the CPU lacks
            assert _panels(torch.randn(3, 64), weight) is None


@needs_panels
def test_the_lm_head_keeps_its_inputs_unrounded(tmp_path) -> None:
    shapes = {"gate_up": (96, 64), "lm_head": (80, 64)}

    def panels_fastest(kernel: object, packed: object, x: torch.Tensor) -> float:
        return 1e-6 if getattr(kernel, "rounds_inputs", False) else 1e-3

    choice = choose(shapes, CPU, torch.float32, "int4", cache=tmp_path, budget_s=30.0,
                    timer=panels_fastest)
    assert {k.name for k in choice.kernels["gate_up"]} == {"int4-panels"}
    assert not any(k.rounds_inputs for k in choice.kernels["lm_head"])


def test_int8_panels_give_the_weight_rows() -> None:
    w8 = _int8(torch.randn(37, 100, generator=torch.Generator().manual_seed(3)))
    index = torch.tensor([0, 5, 36, 16, 17, 5])
    rows = int8_panel_rows(int8_to_panels(w8), index, torch.float32)
    assert torch.equal(rows, dequantize_int8(w8)[index])


def test_the_built_panels_ask_for_their_weights_ahead_into_the_caches() -> None:
    """The weight-only kernels fetch their weights ahead with the T0 hint, never non-temporal
    (csrc/portable/wo_shared.h): a compiler that dropped the hints slowed the one-row step, and
    non-temporal fetches kept the default model's weights out of an L3 that holds them."""
    objdump = shutil.which("objdump")
    if platform.machine() != "x86_64" or objdump is None or library.library() is None:
        pytest.skip(f"not x86-64, no objdump or no native library here: {library.failure()}")
    cc = library.compiler()
    assert cc is not None
    code = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(library.target(cc))],
                          capture_output=True, text=True, check=True).stdout
    assert code.count("prefetcht0") > 0
    assert code.count("prefetchnta") == 0
