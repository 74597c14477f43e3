"""int4 panels dequantized into bf16 for torch's GEMM (``int4-panels-dequant``,
csrc/avx512/wo_int4_bf16.c): the float64 product of the dequantized weight rounded once to bf16,
the same bits as the row layout's ``int4-dequant``, and offered only for many rows."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels.matmul.choice import candidates, choose
from minisgl_core.kernels.matmul.weight_only import (
    WeightOnlyDequant,
    dequantize_int4,
    quantize_int4,
)
from minisgl_core.kernels.matmul.wo_panels import (
    WeightOnlyPanels,
    WeightOnlyPanelsDequant,
    panels_tile_bf16,
    to_panels,
)

CPU = torch.device("cpu")
KERNEL = WeightOnlyPanelsDequant()
HERE = KERNEL.available(CPU, torch.bfloat16)  # AVX512-BF16 and the native library
needs_it = pytest.mark.skipif(not HERE, reason="no AVX512-BF16 (or no native library)")
# (out, in): the default model's q/k/v and down, outputs that fill no panel, a partial group
SHAPES = [(960, 576), (576, 1536), (37, 100), (49, 31), (5, 33), (23, 300)]
ROWS = (1, 2, 3, 8, 17, 33, 64, 65)


@needs_it
def test_the_product_is_the_bf16_weight_s_and_the_row_layout_s() -> None:
    gen = torch.Generator().manual_seed(11)
    for out, inp in SHAPES:
        w = quantize_int4(torch.randn(out, inp, generator=gen) * 0.05)
        packed = to_panels(w)
        ref_w = dequantize_int4(w).bfloat16().double()  # rounded once to bf16
        assert torch.equal(panels_tile_bf16(packed, 0, out), ref_w.bfloat16())
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).bfloat16()
            y = KERNEL.run(packed, x, None, None)
            assert y.shape == (rows, out) and y.dtype == torch.bfloat16
            ref = x.double() @ ref_w.t()
            err = float((y.double() - ref).abs().max() / ref.abs().max())
            assert err < 1e-2, (out, inp, rows, err)  # the output's bf16 rounding
            # one tile here: the same GEMM on the same bf16 weight as the row layout's kernel
            assert torch.equal(y, WeightOnlyDequant("int4").run(w, x, None, None))


@needs_it
def test_bias_and_residual_are_added() -> None:
    gen = torch.Generator().manual_seed(12)
    packed = to_panels(quantize_int4(torch.randn(37, 100, generator=gen)))
    x, bias, res = (torch.randn(*s, generator=gen).bfloat16() for s in ((20, 100), (37,),
                                                                         (20, 37)))
    plain = KERNEL.run(packed, x, None, None).float()
    for b in (None, bias):
        y = KERNEL.run(packed, x, b, res)
        want = plain + res.float() + (0 if b is None else b.float())
        assert float((y.float() - want).abs().max() / want.abs().max()) < 1e-2


def test_offered_for_int4_bf16_where_the_cpu_has_avx512_bf16() -> None:
    assert not KERNEL.available(CPU, torch.float32)
    assert not WeightOnlyPanelsDequant("int8-wo").available(CPU, torch.bfloat16)
    names = {k.name for k in candidates("gate_up", CPU, torch.bfloat16, "int4")}
    assert ("int4-panels-dequant" in names) == HERE
    assert "int4-panels-dequant" not in {k.name for k in candidates("gate_up", CPU,
                                                                    torch.float32, "int4")}
    assert KERNEL.layout == WeightOnlyPanels().layout and not KERNEL.rounds_inputs


@needs_it
def test_the_choice_gives_it_only_steps_of_many_rows(tmp_path) -> None:
    def it_is_fastest(kernel: object, packed: object, x: torch.Tensor) -> float:
        return 1e-6 if getattr(kernel, "name", "") == KERNEL.name else 1e-3

    choice = choose({"gate_up": (96, 64)}, CPU, torch.bfloat16, "int4", cache=tmp_path,
                    budget_s=30.0, timer=it_is_fastest)
    names = [k.name for k in choice.kernels["gate_up"]]
    # buckets 1 and 8 keep the panels' own kernel (same layout); 32, 128 and 512 take this one
    assert names[2:] == [KERNEL.name] * 3
    assert KERNEL.name not in names[:2] and {k.layout for k in choice.kernels["gate_up"]} == {
        "int4-panels"}
