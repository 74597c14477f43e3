"""int8 panels against inputs split in two int8 parts, for the LM head, whose inputs are never
rounded to int8 (docs/design/kernels.md, 17. and 23.).

Each row of inputs is rounded as the panels round it (``qx d``, groups of 32), and what that
left, ``x - qx d``, is rounded the same way with its own, 254 times finer, scale: the two parts
sum to ``x`` within ``max|x| / 64516`` a group, finer than bf16's own rounding of the largest
input. The panel kernel multiplies both parts (twice the dot products, each weight byte still
read once a call) and adds their sums: on VNNI's int8 dot product that is faster at 8 rows and
more than the dot-product kernels and the bf16 GEMM of the int8 weight, where there is no AMX.
"""

from __future__ import annotations

import torch

from minisgl_core.kernels.matmul.weight_only import dequantize_int8, fused_run
from minisgl_core.kernels.matmul.wo_panels import (
    Int8Panels,
    WeightOnlyPanels,
    int8_from_panels,
    panels_matmul,
    q8_rows,
)


def q8_split_rows(x: torch.Tensor) -> torch.Tensor:
    """What the split kernel computes with in place of ``x [T, in]``: the rounded rows plus
    their remainder rounded; fp32 ``[T, in]``."""
    hi = q8_rows(x)
    return hi + q8_rows(x.float() - hi)


def split_matmul(x: torch.Tensor, w: Int8Panels, residual: torch.Tensor | None = None,
                 dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """``q8_split_rows(x) @ dequant(w).T (+ residual)`` (as ``panels_matmul``)."""
    return panels_matmul(x, w, residual, dtype, split=True)


class WeightOnlyPanelsSplit(WeightOnlyPanels):
    """int8 weights in panels (``int8-wo-panels``' layout), inputs in two int8 parts (CPU with
    AVX512-VNNI, fp32 or bf16 inputs): the panels where inputs may not be rounded."""

    rounds_inputs = False
    unrounded_twin_of = "int8-wo-panels"

    def __init__(self) -> None:
        super().__init__("int8-wo")
        self.name = "int8-wo-panels-split"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 72, generator=gen), torch.randn(5, 72, generator=gen)
        packed = self.pack(w)
        y = split_matmul(x, packed)
        if y is None:
            return False
        want = q8_split_rows(x).double() @ dequantize_int8(int8_from_panels(packed)).double().t()
        return torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4)

    def run(self, packed: Int8Panels, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return fused_run(split_matmul, packed, x, bias, residual)
