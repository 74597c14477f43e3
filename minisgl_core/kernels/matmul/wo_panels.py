"""int4 and int8 weights repacked at load into 16-output panels, against int8 inputs on
AVX512-VNNI (csrc/avx512/wo_panels.c; int4 also on AVX2, csrc/avx2/wo_panels_avx2.c): one
layout and one kernel for every row count.

The panels hold the scheme's very integers, scales and mins (so the same bytes; Q4_0's
symmetric weights no mins, which the kernels take as -8 x the scale), reordered so
that 64 bytes hold 4 inputs of 16 outputs (int4: their nibble pairs, 8 inputs; int8: the bytes
plus 128, vpdpbusd's unsigned side): each weight byte is read once a call whatever the rows, a
vpdpbusd multiplies 64 weights by 4 input bytes broadcast, and a panel's 16 sums are one
vector's lanes. The inputs are rounded at the call, in groups of 32: ``d = max|x| / 127``,
``qx = round(x / d)`` (ggml's Q8_1, which its Q4_1 and Q8_0 dot products use too). Being a
layout of its own, the kernel choice weighs it against the scheme's other layout over every
bucket at once (docs/design/kernels.md, 2.). For prefill-sized steps the same panels can also be
dequantized into bf16 a tile at a time for torch's GEMM (``int4-panels-dequant``), which runs on
AMX's tile multiply where the CPU has it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl_core.kernels.matmul.base import add_bias_residual
from minisgl_core.kernels.matmul.w8a8 import quantize_weight
from minisgl_core.kernels.matmul.weight_only import (
    GROUP,
    PROFILE_NAMES,
    TILE_ELEMS,
    Int4Weight,
    Int8Weight,
    WeightOnlyKernel,
    dequantize_int4,
    dequantize_int8,
    fused_run,
    quantize_int4,
    tiled_matmul,
)
from minisgl_core.kernels.native import labelled
from minisgl_core.kernels.native import library as native

PANEL = 16  # outputs a panel


def q8_rows(x: torch.Tensor) -> torch.Tensor:
    """What the panel kernels compute with in place of ``x [T, in]``: each row's groups of
    GROUP inputs rounded to ``qx * d`` as csrc/avx2/wo_panels_avx2.c rounds them (fp32
    arithmetic, ties to even); fp32 ``[T, in]``."""
    rows, inp = x.shape
    groups = -(-inp // GROUP)
    g = torch.nn.functional.pad(x.float(), (0, groups * GROUP - inp)).view(rows, groups, GROUP)
    amax = g.abs().amax(2, keepdim=True)
    # 127 / amax as a division (``127.0 / tensor`` is a reciprocal times 127, rounded twice)
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros(()))
    q = torch.round(g * inv).clamp_(-127, 127)
    return (q * (amax / 127.0)).flatten(1)[:, :inp]


@dataclass(frozen=True)
class Int4Panels:
    """``q [panels, groups, 4, 16, 4]`` uint8 (dword k of lane l: output ``16 p + l``'s group
    bytes ``4k..4k+3``), ``scale`` and ``min`` ``[panels, groups, 16]`` fp16, ``min`` empty for
    a symmetric (Q4_0) weight (its data pointer is then NULL, which the kernels read as ``-8
    scale``); outputs past ``out_features`` are zeros."""

    q: torch.Tensor
    scale: torch.Tensor
    min: torch.Tensor
    in_features: int
    out_features: int

    @property
    def symmetric(self) -> bool:
        """Q4_0's weight: no mins kept, each is ``-8 scale``."""
        return self.min.numel() == 0


def to_panels(w: Int4Weight) -> Int4Panels:
    """The int4 weight ``w`` reordered into panels (no value changes; a symmetric one's mins
    left out)."""
    out, groups, _ = w.q.shape
    pad = -out % PANEL
    q = torch.nn.functional.pad(w.q, (0, 0, 0, 0, 0, pad))  # [out_p, groups, 16]
    panels = q.shape[0] // PANEL
    q = q.view(panels, PANEL, groups, 4, 4).permute(0, 2, 3, 1, 4).contiguous()

    def per_group(t: torch.Tensor) -> torch.Tensor:  # [out, groups] -> [panels, groups, 16]
        t = torch.nn.functional.pad(t, (0, 0, 0, pad))
        return t.view(panels, PANEL, groups).permute(0, 2, 1).contiguous()

    mins = torch.empty(0, dtype=w.min.dtype) if w.symmetric else per_group(w.min)
    return Int4Panels(q, per_group(w.scale), mins, w.in_features, out)


def from_panels(p: Int4Panels) -> Int4Weight:
    """The int4 weight the panels hold (``to_panels``'s inverse)."""
    panels, groups = p.q.shape[:2]
    q = p.q.permute(0, 3, 1, 2, 4).reshape(panels * PANEL, groups, 16)[:p.out_features]

    def per_row(t: torch.Tensor) -> torch.Tensor:
        return t.permute(0, 2, 1).reshape(panels * PANEL, groups)[:p.out_features]

    scale = per_row(p.scale).contiguous()
    mins = (scale * -8).contiguous() if p.symmetric else per_row(p.min).contiguous()
    return Int4Weight(q.contiguous(), scale, mins, p.in_features, p.symmetric)


@dataclass(frozen=True)
class Int8Panels:
    """``q [panels, in_groups * 8, 16, 4]`` uint8 (dword k of lane l: output ``16 p + l``'s
    inputs ``4k..4k+3``, plus 128; the inputs padded to whole groups of 32), ``scale
    [panels * 16]`` fp32; outputs past ``out_features`` are zeros."""

    q: torch.Tensor
    scale: torch.Tensor
    in_features: int
    out_features: int


def int8_to_panels(w: Int8Weight) -> Int8Panels:
    """The int8 weight ``w`` reordered into panels (each integer plus 128)."""
    out, inp = w.q.shape
    pad_out, pad_in = -out % PANEL, -inp % GROUP
    u = (w.q.to(torch.int16) + 128).to(torch.uint8)
    u = torch.nn.functional.pad(u, (0, pad_in, 0, pad_out), value=128)  # the zero weight
    panels, quads = u.shape[0] // PANEL, u.shape[1] // 4
    q = u.view(panels, PANEL, quads, 4).permute(0, 2, 1, 3).contiguous()
    return Int8Panels(q, torch.nn.functional.pad(w.scale.float(), (0, pad_out)).contiguous(),
                      inp, out)


def int8_from_panels(p: Int8Panels) -> Int8Weight:
    """The int8 weight the panels hold (``int8_to_panels``'s inverse)."""
    panels, quads = p.q.shape[:2]
    u = p.q.permute(0, 2, 1, 3).reshape(panels * PANEL, quads * 4)
    q = (u[:p.out_features, :p.in_features].to(torch.int16) - 128).to(torch.int8)
    return Int8Weight(q.contiguous(), p.scale[:p.out_features].contiguous())


def int8_panel_rows(p: Int8Panels, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Rows ``index [T]`` of the weight as ``[T, in]`` in ``dtype``: a tied LM head's panels
    serve the embedding lookups (row v is output v's integers times its scale)."""
    quads = p.q.shape[1]
    panel, lane = index // PANEL, index % PANEL
    u = p.q[panel[:, None], torch.arange(quads, device=index.device)[None, :], lane[:, None]]
    q = u.reshape(index.shape[0], quads * 4)[:, :p.in_features].to(torch.int16) - 128
    return q.to(dtype) * p.scale.index_select(0, index).to(dtype).unsqueeze(1)


def panels_matmul(x: torch.Tensor, w: Int4Panels | Int8Panels,
                  residual: torch.Tensor | None = None,
                  dtype: torch.dtype = torch.float32, split: bool = False) -> torch.Tensor | None:
    """``q8_rows(x) [T, in] @ dequant(w).T (+ residual)`` -> ``[T, out]`` in ``dtype`` (fp32 or
    bf16: summed in fp32, rounded once); x fp32 or bf16. ``split`` (int8 panels): each row of x
    in two rounded parts, ``q8_split_rows(x)`` (wo_panels_split.py). None where the library or
    the CPU cannot."""
    lib = native.library()
    if lib is None or x.dtype not in (torch.float32, torch.bfloat16):
        return None
    x = x.contiguous()
    rows, inp = x.shape
    res = None if residual is None else residual.to(dtype).contiguous()
    y = torch.empty(rows, w.out_features, dtype=dtype)
    head = (x.data_ptr(), int(x.dtype == torch.bfloat16), rows, inp, w.q.data_ptr(),
            w.scale.data_ptr())
    tail = (w.out_features, y.data_ptr(), int(dtype == torch.bfloat16),
            None if res is None else res.data_ptr(), torch.get_num_threads())
    if isinstance(w, Int4Panels):
        kernel, args = lib.wo_int4_panels, (*head, w.min.data_ptr(), *tail)
    else:
        kernel = lib.wo_int8_panels_split if split else lib.wo_int8_panels
        args = (*head, *tail)
    return y if labelled.call(PROFILE_NAMES[4], kernel, *args) == 0 else None


def unpanel(p: Int4Panels | Int8Panels) -> Int4Weight | Int8Weight:
    """The int4 or int8 weight some panels hold."""
    return from_panels(p) if isinstance(p, Int4Panels) else int8_from_panels(p)


class WeightOnlyPanels(WeightOnlyKernel):
    """int4 or int8 weights in 16-output panels, inputs rounded to int8 at the call (CPU with
    AVX512-VNNI, or AVX2 for int4; fp32 or bf16 inputs)."""

    rounds_inputs = True
    fp32_rows = True

    def __init__(self, scheme: str = "int4") -> None:
        self.scheme = self.quantized = scheme
        self.name = self.layout = f"{scheme}-panels"

    def pack(self, weight: torch.Tensor) -> Int4Panels | Int8Panels:
        if self.scheme == "int4":
            return to_panels(quantize_int4(weight))
        return int8_to_panels(Int8Weight(*quantize_weight(weight)))

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 72, generator=gen), torch.randn(5, 72, generator=gen)
        packed = self.pack(w)
        y = self.matmul(x, packed)
        if y is None:
            return False
        w8 = unpanel(packed)
        deq = dequantize_int4(w8) if isinstance(w8, Int4Weight) else dequantize_int8(w8)
        want = self.inputs(x).double() @ deq.double().t()
        return torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4)

    @staticmethod
    def inputs(x: torch.Tensor) -> torch.Tensor:
        """What the kernel multiplies in place of ``x``: its rows rounded (fp32)."""
        return q8_rows(x)

    @staticmethod
    def matmul(x: torch.Tensor, w: Int4Panels | Int8Panels, residual: torch.Tensor | None = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
        """The kernel on ``x`` (as ``panels_matmul``)."""
        return panels_matmul(x, w, residual, dtype)

    def run(self, packed: Int4Panels | Int8Panels, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return fused_run(self.matmul, packed, x, bias, residual)


def panels_tile_bf16(p: Int4Panels, a: int, b: int) -> torch.Tensor | None:
    """Outputs ``[a, b)`` of int4 panels as the bf16 weight ``[b - a, in]`` (nib * scale + min
    in fp32, rounded once: ``dequantize_int4`` of the same weight, in bf16) by
    csrc/avx512/wo_int4_bf16.c; None where the library or AVX512-BF16 is missing."""
    lib = native.library()
    if lib is None:
        return None
    out = torch.empty(b - a, p.in_features, dtype=torch.bfloat16)
    done = lib.wo_int4_panels_dequant_bf16(p.q.data_ptr(), p.scale.data_ptr(), p.min.data_ptr(),
                                           p.in_features, a, b, out.data_ptr(),
                                           torch.get_num_threads())
    return out if done == 0 else None


class WeightOnlyPanelsDequant(WeightOnlyPanels):
    """int4 panels dequantized into bf16 a tile of whole panels at a time, then torch's GEMM
    (oneDNN, on AMX's tile multiply where the CPU has it): the panels' layout for many rows,
    inputs not rounded (CPU with AVX512-BF16, bf16 inputs, from 17 rows)."""

    rounds_inputs = False
    fp32_rows = False  # bf16 rows only

    def __init__(self, scheme: str = "int4") -> None:
        super().__init__(scheme)
        self.name = f"{scheme}-panels-dequant"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if self.scheme != "int4" or device.type != "cpu" or dtype != torch.bfloat16:
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 72, generator=gen), torch.randn(5, 72, generator=gen).bfloat16()
        packed = self.pack(w)
        if panels_tile_bf16(packed, 0, 24) is None:
            return False
        want = x.float() @ dequantize_int4(from_panels(packed)).bfloat16().float().t()
        y = self.run(packed, x, None, None)
        return torch.allclose(y.float(), want, rtol=1e-2, atol=1e-2)

    def serves(self, rows: int) -> bool:
        # the whole weight is dequantized at every call: worth it only over many rows
        return rows > 16

    def run(self, packed: Int4Panels, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        def tile(a: int, b: int) -> torch.Tensor:
            w = panels_tile_bf16(packed, a, b)
            assert w is not None, "int4-panels-dequant ran where available() said it could not"
            return w

        step = max(1, TILE_ELEMS // packed.in_features // PANEL) * PANEL  # whole panels
        return add_bias_residual(tiled_matmul(x, packed.out_features, step, tile), bias, residual)
