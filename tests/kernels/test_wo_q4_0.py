"""Weights that already are Q4_0's (a Q4_0 GGUF's, in the engine's dtype) stay Q4_0 at int4:
found by their values, quantized to the very integers, and held in the panels without mins,
which every panel kernel takes as ``-8 scale`` (the same sums as the mins kept)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from minisgl_core.kernels.linear import Linear
from minisgl_core.kernels.matmul.weight_only import (
    GROUP,
    dequantize_int4,
    is_q4_0,
    quantize_int4,
)
from minisgl_core.kernels.matmul.wo_panels import (
    WeightOnlyPanels,
    WeightOnlyPanelsDequant,
    from_panels,
    panels_matmul,
    panels_tile_bf16,
    q8_rows,
    to_panels,
)
from minisgl_core.kernels.matmul.wo_panels_amx import WeightOnlyPanelsAmx, panels_amx_matmul

CPU = torch.device("cpu")
PANELS_HERE = WeightOnlyPanels().available(CPU, torch.float32)  # AVX2 or AVX512-VNNI
SHAPES = [(960, 576), (37, 100), (49, 31), (5, 33), (23, 300), (100, 17)]
ROWS = (1, 2, 3, 8, 17, 33, 64, 65)


def q4_0_weight(out: int, inp: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight as ggml's Q4_0 stores it: per group of 32 an fp16 ``d`` and nibbles, the value
    of largest magnitude at nibble 0 (``-8 d``); ``(W [out, in] fp32, nib [out, groups, 32],
    d [out, groups])``."""
    gen = torch.Generator().manual_seed(seed)
    groups = -(-inp // GROUP)
    nib = torch.randint(1, 16, (out, groups, GROUP), generator=gen)
    nib[:, :, 0] = 0  # ggml maps the value of largest magnitude to -8 (a live column)
    d = (torch.rand(out, groups, generator=gen) * 0.02 + 0.001).half()
    d = torch.where(torch.rand(out, groups, generator=gen) < 0.5, d, -d)
    w = (nib - 8).float() * d.float()[..., None]
    return w.flatten(1)[:, :inp].contiguous(), nib, d


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_q4_0_weight_keeps_its_integers(dtype: torch.dtype) -> None:
    for out, inp in SHAPES:
        w, nib, d = q4_0_weight(out, inp, out + inp)
        packed = quantize_int4(w.to(dtype))
        assert packed.symmetric, (out, inp)
        got = torch.cat((packed.q & 15, packed.q >> 4), 2).long()  # [out, groups, 32]
        live = torch.arange(got.shape[1] * GROUP).view(1, -1, GROUP) < inp  # not the padding
        assert torch.equal(got[live.expand_as(got)], nib[live.expand_as(nib)]), (out, inp)
        assert torch.equal(packed.min, packed.scale * -8)
        if dtype == torch.float32:  # the scales too: the GGUF's weight, exactly
            assert torch.equal(packed.scale, d) and torch.equal(dequantize_int4(packed), w)
        else:  # the scale is d in bf16
            assert torch.equal(packed.scale, d.bfloat16().half())


def test_float_and_q4_1_weights_are_not_q4_0() -> None:
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(64, 96, generator=gen) * 0.05
    assert not quantize_int4(w).symmetric
    q4_1 = dequantize_int4(quantize_int4(w, symmetric=False))  # [min, max] onto 0..15
    assert not quantize_int4(q4_1).symmetric and not quantize_int4(q4_1.bfloat16()).symmetric
    # one group off the grid in a Q4_0 weight's last row makes all of it Q4_1
    q4_0, _, _ = q4_0_weight(40, 64, 4)
    q4_0[-1, 3] += 0.3 * q4_0[-1, 0].abs() / 8
    assert not is_q4_0(q4_0.view(40, 2, GROUP))
    assert quantize_int4(q4_0, symmetric=True).symmetric  # asked for: Q4_0 anyway


def test_panels_of_a_q4_0_weight_keep_no_mins() -> None:
    w, _, _ = q4_0_weight(37, 100, 5)
    packed = quantize_int4(w)
    p = to_panels(packed)
    assert p.symmetric and p.min.numel() == 0
    back = from_panels(p)
    assert all(torch.equal(getattr(back, n), getattr(packed, n)) for n in ("q", "scale", "min"))
    assert back.symmetric
    kernel = WeightOnlyPanels()
    weights = 48 * 128  # 3 panels of 16 outputs, 4 groups of 32
    assert kernel.nbytes(p) == weights // 2 + weights // GROUP * 2  # 0.5625 bytes a weight
    with_mins = to_panels(dataclasses.replace(packed, symmetric=False))
    assert kernel.nbytes(with_mins) == weights // 2 + weights // GROUP * 4  # 0.625


@pytest.mark.skipif(not PANELS_HERE, reason="no AVX2 (or no native library)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_q4_0_panels_give_the_sums_of_the_mins_kept(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(6)
    for out, inp in SHAPES:
        w, _, _ = q4_0_weight(out, inp, out * inp)
        packed = quantize_int4(w)
        sym, kept = to_panels(packed), to_panels(dataclasses.replace(packed, symmetric=False))
        ref_w = dequantize_int4(packed).double()
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).to(dtype)
            y = panels_matmul(x, sym)
            assert y is not None and y.shape == (rows, out)
            ref = q8_rows(x).double() @ ref_w.t()
            assert float((y - ref).abs().max() / ref.abs().max()) < 1e-5, (out, inp, rows)
            assert torch.equal(y, panels_matmul(x, kept)), (out, inp, rows)
            res = torch.randn(rows, out, generator=gen).to(dtype)
            fused = panels_matmul(x, sym, res, dtype)
            assert fused is not None and torch.equal(fused, (y + res.float()).to(dtype))


def test_q4_0_panels_dequantize_and_multiply_on_tiles_as_with_mins() -> None:
    w, _, _ = q4_0_weight(70, 200, 8)
    packed = quantize_int4(w)
    sym, kept = to_panels(packed), to_panels(dataclasses.replace(packed, symmetric=False))
    tile = panels_tile_bf16(sym, 16, 64)
    if tile is None:
        pytest.skip("no AVX512-BF16 (or no native library)")
    assert torch.equal(tile, dequantize_int4(packed, slice(16, 64), torch.float32).bfloat16())
    x = torch.randn(20, 200, generator=torch.Generator().manual_seed(9)).bfloat16()
    dequant = WeightOnlyPanelsDequant()
    assert torch.equal(dequant.run(sym, x, None, None), dequant.run(kept, x, None, None))
    if not WeightOnlyPanelsAmx().available(CPU, torch.bfloat16):
        return  # no AMX here
    y = panels_amx_matmul(x, sym)
    assert y is not None and torch.equal(y, panels_amx_matmul(x, kept))


@pytest.mark.skipif(not PANELS_HERE, reason="no AVX2 (or no native library)")
def test_a_linear_on_a_q4_0_weight_runs_its_panels_without_mins() -> None:
    w, _, _ = q4_0_weight(96, 128, 10)
    linear = Linear(w.bfloat16(), None, "int4-panels")
    assert linear.weight.symmetric
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(11)).bfloat16()
    want = q8_rows(x).double() @ dequantize_int4(from_panels(linear.weight)).double().t()
    got = linear(x).double()
    assert float((got - want).abs().max() / want.abs().max()) < 1e-2  # the output's bf16
