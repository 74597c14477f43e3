"""int8 panels against inputs split in two int8 parts (wo_panels_split.py, the LM head's panels):
against the float64 product of the dequantized weight and the unrounded inputs, in Python and in
the C++ operator; the split's size; bias and residual; and the choice offering it only where
inputs may not be rounded."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels.linear import Linear
from minisgl_core.kernels.matmul.choice import candidates, choose
from minisgl_core.kernels.matmul.weight_only import dequantize_int8
from minisgl_core.kernels.matmul.wo_panels import WeightOnlyPanels, int8_from_panels, q8_rows
from minisgl_core.kernels.matmul.wo_panels_split import (
    WeightOnlyPanelsSplit,
    q8_split_rows,
    split_matmul,
)
from minisgl_core.kernels.native import ops as native_ops

CPU = torch.device("cpu")
KERNEL = WeightOnlyPanelsSplit()
# AVX512-VNNI and the native library: where the plain int8 panels run, the split ones must too
HERE = WeightOnlyPanels("int8-wo").available(CPU, torch.float32)
needs_it = pytest.mark.skipif(not HERE, reason="no AVX512-VNNI (or no native library)")
# (out, in): the default model's LM head at a tenth of its vocabulary, odd widths (outputs that
# fill no panel, a partial group, one group and less)
SHAPES = [(4915, 576), (37, 100), (49, 31), (5, 33), (100, 17)]
ROWS = (1, 2, 3, 8, 17, 33, 64, 65)


def _exact(x: torch.Tensor, packed: object) -> torch.Tensor:
    return x.double() @ dequantize_int8(int8_from_panels(packed)).double().t()


@needs_it
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_split_panels_equal_the_product_of_the_unrounded_inputs(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(11)
    for out, inp in SHAPES:
        packed = KERNEL.pack(torch.randn(out, inp, generator=gen) * 0.05)
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).to(dtype)
            exact = _exact(x, packed)
            y = split_matmul(x, packed)
            assert y is not None and y.shape == (rows, out) and y.dtype == torch.float32
            top = exact.abs().max()
            err = float((y - exact).abs().max() / top)
            assert err < 1e-4, (out, inp, rows, err)
            # the plain panels' rounding is over a hundred times that
            rounded = q8_rows(x).double() @ dequantize_int8(int8_from_panels(packed)).double().t()
            assert float((rounded - exact).abs().max() / top) > 100 * err, (out, inp, rows)


def test_the_two_parts_sum_to_the_inputs_within_a_64516th_of_each_group() -> None:
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(9, 100, generator=gen) * torch.logspace(-3, 3, 100)  # groups of every size
    x[3, 32:64] = 0.0  # a group of zeros stays zeros
    parts = q8_split_rows(x)
    groups = torch.nn.functional.pad(x, (0, 28)).view(9, 4, 32).abs().amax(2)
    bound = groups.repeat_interleave(32, 1)[:, :100] / 64516
    assert bool(((parts - x).abs() <= bound * 1.001 + 1e-30).all())
    assert torch.equal(parts[3, 32:64], torch.zeros(32))
    assert float(((q8_rows(x) - x).abs() / bound.clamp_min(1e-30)).max()) > 200  # one part: not


@needs_it
@pytest.mark.parametrize("rows", ROWS)
def test_the_cxx_operator_gives_the_kernels_bits(rows: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    w = torch.randn(70, 100, generator=gen)
    linear = Linear(w, None, KERNEL.name)
    assert linear.native == native_ops.available()  # the C++ operator knows the kernel
    assert linear.serves_rows  # a tied LM head on it still gives the embedding rows
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(rows, 100, generator=gen).to(dtype)
        assert torch.equal(linear(x), KERNEL.run(linear.weight, x, None, None))


@needs_it
def test_split_panels_add_bias_and_residual() -> None:
    gen = torch.Generator().manual_seed(13)
    packed = KERNEL.pack(torch.randn(37, 100, generator=gen))
    x, bias, res = (torch.randn(*s, generator=gen).bfloat16() for s in ((9, 100), (37,), (9, 37)))
    plain = _exact(x, packed)
    for b in (None, bias):
        y = KERNEL.run(packed, x, b, res)
        ref = plain + res.double() + (0 if b is None else b.double())
        assert y.dtype == torch.bfloat16 and y.shape == (9, 37)
        assert float((y.double() - ref).abs().max() / ref.abs().max()) < 1e-2  # bf16 output


def test_it_is_offered_to_the_lm_head_only(tmp_path) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        head = {k.name for k in candidates("lm_head", CPU, dtype, "int4")}
        assert KERNEL.available(CPU, dtype) == HERE
        assert (KERNEL.name in head) == HERE
    if not HERE:
        return
    shapes = {"gate_up": (96, 64), "lm_head": (80, 64)}

    def split_fastest(kernel: object, packed: object, x: torch.Tensor) -> float:
        return 1e-6 if getattr(kernel, "name", "") == KERNEL.name else 1e-3

    for quantization in ("int8-wo", "int4"):
        choice = choose(shapes, CPU, torch.float32, quantization, cache=tmp_path / quantization,
                        budget_s=30.0, timer=split_fastest)
        assert {k.name for k in choice.kernels["lm_head"]} == {KERNEL.name}
        # where inputs may be rounded, the plain panels do its work faster: not offered
        assert KERNEL.name not in {k.name for k in choice.kernels["gate_up"]}
