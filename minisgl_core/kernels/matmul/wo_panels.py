"""int4 weights repacked at load into 16-output panels, against int8 inputs on AVX512-VNNI
(csrc/avx512/wo_int4_panels.c): one layout and one kernel for every row count.

The panels hold the int4 scheme's very nibbles, scales and mins (so the same bytes), reordered
so that 64 bytes hold 4 inputs' nibble pairs of 16 outputs: each weight byte is read once a
call whatever the rows, a vpdpbusd multiplies 64 nibbles by 4 input bytes broadcast, and a
panel's 16 sums are one vector's lanes. The inputs are rounded to int8 as ``wo_q8.q8_rows``
says. Being a layout of its own, the kernel choice weighs it against the int4 layout's kernels
over every bucket at once (docs/design/kernels.md, 2.).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl_core.kernels.matmul.weight_only import (
    PROFILE_NAMES,
    Int4Weight,
    WeightOnlyKernel,
    dequantize_int4,
    fused_run,
    quantize_int4,
)
from minisgl_core.kernels.matmul.wo_q8 import q8_rows
from minisgl_core.kernels.native import library as native

PANEL = 16  # outputs a panel


@dataclass(frozen=True)
class Int4Panels:
    """``q [panels, groups, 4, 16, 4]`` uint8 (dword k of lane l: output ``16 p + l``'s group
    bytes ``4k..4k+3``), ``scale`` and ``min`` ``[panels, groups, 16]`` fp16; outputs past
    ``out_features`` are zeros."""

    q: torch.Tensor
    scale: torch.Tensor
    min: torch.Tensor
    in_features: int
    out_features: int


def to_panels(w: Int4Weight) -> Int4Panels:
    """The int4 weight ``w`` reordered into panels (no value changes)."""
    out, groups, _ = w.q.shape
    pad = -out % PANEL
    q = torch.nn.functional.pad(w.q, (0, 0, 0, 0, 0, pad))  # [out_p, groups, 16]
    panels = q.shape[0] // PANEL
    q = q.view(panels, PANEL, groups, 4, 4).permute(0, 2, 3, 1, 4).contiguous()

    def per_group(t: torch.Tensor) -> torch.Tensor:  # [out, groups] -> [panels, groups, 16]
        t = torch.nn.functional.pad(t, (0, 0, 0, pad))
        return t.view(panels, PANEL, groups).permute(0, 2, 1).contiguous()

    return Int4Panels(q, per_group(w.scale), per_group(w.min), w.in_features, out)


def from_panels(p: Int4Panels) -> Int4Weight:
    """The int4 weight the panels hold (``to_panels``'s inverse)."""
    panels, groups = p.q.shape[:2]
    q = p.q.permute(0, 3, 1, 2, 4).reshape(panels * PANEL, groups, 16)[:p.out_features]

    def per_row(t: torch.Tensor) -> torch.Tensor:
        return t.permute(0, 2, 1).reshape(panels * PANEL, groups)[:p.out_features]

    return Int4Weight(q.contiguous(), per_row(p.scale).contiguous(), per_row(p.min).contiguous(),
                      p.in_features)


def panels_matmul(x: torch.Tensor, w: Int4Panels, residual: torch.Tensor | None = None,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """``q8_rows(x) [T, in] @ dequant(w).T (+ residual)`` -> ``[T, out]`` in ``dtype`` (fp32 or
    bf16: summed in fp32, rounded once); x fp32 or bf16. None where the library or the CPU
    cannot."""
    lib = native.library()
    if lib is None or x.dtype not in (torch.float32, torch.bfloat16):
        return None
    x = x.contiguous()
    rows, inp = x.shape
    res = None if residual is None else residual.to(dtype).contiguous()
    y = torch.empty(rows, w.out_features, dtype=dtype)
    args = (x.data_ptr(), int(x.dtype == torch.bfloat16), rows, inp, w.q.data_ptr(),
            w.scale.data_ptr(), w.min.data_ptr(), w.out_features, y.data_ptr(),
            int(dtype == torch.bfloat16), None if res is None else res.data_ptr(),
            torch.get_num_threads())
    if torch.autograd._profiler_enabled():  # torch.profiler cannot see into a ctypes call
        with torch.profiler.record_function(PROFILE_NAMES[4]):
            return y if lib.wo_int4_panels(*args) == 0 else None
    return y if lib.wo_int4_panels(*args) == 0 else None


class WeightOnlyPanels(WeightOnlyKernel):
    """int4 weights in 16-output panels, inputs rounded to int8 at the call (CPU with
    AVX512-VNNI, fp32 or bf16 inputs)."""

    def __init__(self, scheme: str = "int4") -> None:
        assert scheme == "int4", "panels are an int4 layout"
        self.scheme = self.quantized = scheme
        self.name = self.layout = "int4-panels"

    def pack(self, weight: torch.Tensor) -> Int4Panels:
        return to_panels(quantize_int4(weight))

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 72, generator=gen), torch.randn(5, 72, generator=gen)
        packed = self.pack(w)
        y = panels_matmul(x, packed)
        if y is None:
            return False
        want = q8_rows(x).double() @ dequantize_int4(from_panels(packed)).double().t()
        return torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4)

    def run(self, packed: Int4Panels, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return fused_run(panels_matmul, packed, x, bias, residual)
