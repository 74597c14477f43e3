"""int8 panels against inputs split in two int8 parts, for the LM head, whose inputs are never
rounded to int8 (docs/design/kernels.md, 17. and 23.).

Each row of inputs is rounded as the panels round it (``qx d``, groups of 32), and what that
left, ``x - qx d``, is rounded the same way with its own, 254 times finer, scale: the two parts
sum to ``x`` within ``max|x| / 64516`` a group, finer than bf16's own rounding of the largest
input. The panel kernel multiplies both parts (twice the dot products, each weight byte still
read once a call) and adds their sums: on VNNI's int8 dot product, where there is no AMX, that
is faster at every row count than the head's other kernels there (the dot-product kernel, the
bf16 GEMM of the int8 weight).
"""

from __future__ import annotations

import torch

from minisgl_core.kernels.matmul.wo_panels import (
    Int8Panels,
    WeightOnlyPanels,
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

    @staticmethod
    def inputs(x: torch.Tensor) -> torch.Tensor:
        return q8_split_rows(x)

    @staticmethod
    def matmul(x: torch.Tensor, w: Int8Panels, residual: torch.Tensor | None = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
        return split_matmul(x, w, residual, dtype)
