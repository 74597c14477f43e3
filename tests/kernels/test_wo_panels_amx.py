"""int4 panels on AMX's tile multiply (matmul/wo_panels_amx.py): the float64 product of the
weight rounded to bf16, the very bits of ``int4-amx`` on the row layout of the same weight, in
Python and in the C++ operator; offered for int4 with bf16 inputs where the CPU has AMX."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels import Linear
from minisgl_core.kernels.matmul.choice import candidates
from minisgl_core.kernels.matmul.weight_only import WeightOnlyAmx, dequantize_int4
from minisgl_core.kernels.matmul.wo_panels import WeightOnlyPanels, from_panels
from minisgl_core.kernels.matmul.wo_panels_amx import WeightOnlyPanelsAmx
from minisgl_core.kernels.native import ops as native_ops

CPU, BF16 = torch.device("cpu"), torch.bfloat16
KERNEL, ROW_LAYOUT = WeightOnlyPanelsAmx(), WeightOnlyAmx("int4")
HERE = KERNEL.available(CPU, BF16)
needs_it = pytest.mark.skipif(not HERE, reason="no AMX here (or no native library)")
# (out, in): the default model's q/k/v, outputs that fill no panel, a partial group, odd widths
SHAPES = [(960, 576), (37, 100), (49, 31), (5, 33), (100, 130)]
ROWS = (1, 2, 3, 8, 16, 17, 33, 64, 65, 130)


@needs_it
def test_the_product_is_the_bf16_weight_s_and_int4_amx_s_bits() -> None:
    gen = torch.Generator().manual_seed(31)
    for out, inp in SHAPES:
        w = (torch.randn(out, inp, generator=gen) * 0.05).to(BF16)
        linear = Linear(w, None, KERNEL)  # every bucket this kernel; native where it is built
        assert linear.native == native_ops.available()  # the C++ operator knows the kernel
        packed, rows_layout = linear.weight, ROW_LAYOUT.pack(w)
        deq = dequantize_int4(from_panels(packed)).to(BF16).double()
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).to(BF16)
            ref = x.double() @ deq.t()
            same_tiles = ROW_LAYOUT.run(rows_layout, x, None, None)
            for y in (KERNEL.run(packed, x, None, None), linear(x)):
                assert y.shape == (rows, out) and y.dtype == BF16
                err = float((y.double() - ref).abs().max() / ref.abs().max())
                assert err < 1e-2, (out, inp, rows, err)
                assert torch.equal(y, same_tiles), (out, inp, rows)


@needs_it
def test_bias_and_residual_are_added() -> None:
    gen = torch.Generator().manual_seed(32)
    w = torch.randn(37, 100, generator=gen).to(BF16)
    x, res = torch.randn(20, 100, generator=gen).to(BF16), torch.randn(20, 37, generator=gen)
    for bias in (None, torch.randn(37, generator=gen).to(BF16)):
        linear = Linear(w, bias, KERNEL)
        plain = KERNEL.run(linear.weight, x, None, None).double()
        y = linear(x, res.to(BF16)).double()
        want = plain + res.to(BF16).double() + (0 if bias is None else bias.double())
        assert float((y - want).abs().max() / want.abs().max()) < 1e-2


def test_offered_for_int4_bf16_in_the_panels_layout_where_the_cpu_has_amx() -> None:
    assert not KERNEL.available(CPU, torch.float32)
    names = {k.name for k in candidates("gate_up", CPU, BF16, "int4")}
    assert (KERNEL.name in names) == HERE
    assert KERNEL.name not in {k.name for k in candidates("gate_up", CPU, BF16, "int8-wo")}
    assert KERNEL.layout == WeightOnlyPanels().layout and not KERNEL.rounds_inputs
    assert not KERNEL.serves(1) and KERNEL.serves(2)
