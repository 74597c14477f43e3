"""int4 panels on AMX's tile multiply: the panels' own bytes unpacked into bf16 tiles
(csrc/amx/wo_amx.c), so the panels' layout serves wide batches on AMX without a second copy.

The panels (wo_panels.py) round their inputs to int8 and multiply on the vector unit: fastest at
1-8 rows, but their time grows with the rows. ``int4-amx`` unpacks each weight tile once for up
to 64 rows, but from the row layout, which at one row is 2x the panels' time. Being layouts of
their own, a layer had to take one or the other (docs/design/kernels.md, 2.). This kernel
unpacks the panels' groups into the very tiles ``int4-amx`` builds (``nib * scale + min`` in
fp32, rounded once to bf16; inputs not rounded), so the panels' layout has both.
"""

from __future__ import annotations

import torch

from minisgl_core.kernels.matmul.weight_only import PROFILE_NAMES, dequantize_int4, fused_run
from minisgl_core.kernels.matmul.wo_panels import Int4Panels, WeightOnlyPanels, from_panels
from minisgl_core.kernels.native import labelled
from minisgl_core.kernels.native import library as native


def panels_amx_matmul(x: torch.Tensor, p: Int4Panels, residual: torch.Tensor | None = None,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """``x [T, in] bf16 @ W.T (+ residual)`` -> ``[T, out]`` in ``dtype`` (fp32 or bf16: summed
    in fp32, rounded once), W the int4 panels; None where the library or the CPU has no AMX."""
    lib = native.library()
    if lib is None or x.dtype != torch.bfloat16 or not lib.wo_has_amx():
        return None
    x = x.contiguous()
    res = None if residual is None else residual.to(dtype).contiguous()
    y = torch.empty(x.shape[0], p.out_features, dtype=dtype)
    call = (x.data_ptr(), x.shape[0], x.shape[1], p.q.data_ptr(), p.scale.data_ptr(),
            p.min.data_ptr(), p.out_features, y.data_ptr(), int(dtype == torch.bfloat16),
            None if res is None else res.data_ptr(), torch.get_num_threads())
    return y if labelled.call(PROFILE_NAMES[2], lib.wo_amx_int4_panels, *call) == 0 else None


class WeightOnlyPanelsAmx(WeightOnlyPanels):
    """int4 panels unpacked into bf16 tiles for AMX (CPU with AMX, bf16 inputs, from 2 rows:
    at one the panels' own kernel reads the bytes faster)."""

    rounds_inputs = False
    fp32_rows = False  # bf16 rows only

    def __init__(self) -> None:
        super().__init__("int4")
        self.name = "int4-panels-amx"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype != torch.bfloat16:
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(40, 72, generator=gen), torch.randn(5, 72, generator=gen).bfloat16()
        packed = self.pack(w)
        y = panels_amx_matmul(x, packed)
        if y is None:
            return False
        want = x.float() @ dequantize_int4(from_panels(packed)).bfloat16().float().t()
        return torch.allclose(y, want, rtol=1e-4, atol=1e-4)

    def serves(self, rows: int) -> bool:
        return rows > 1

    def run(self, packed: Int4Panels, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return fused_run(panels_amx_matmul, packed, x, bias, residual)
