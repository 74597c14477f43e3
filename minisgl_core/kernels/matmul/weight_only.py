"""Weight-only quantized kernels: ``--quantization int8-wo`` and ``--quantization int4``.

The weights are quantized once at load; activations stay in the engine's dtype (fp32 or bf16).

- ``int8-wo``: symmetric per output channel, ``W[o, i] ~= q[o, i] * scale[o]`` (w8a8.py's
  ``quantize_weight``): 1 byte a weight.
- ``int4``: groups of GROUP inputs of an output row, ``W ~= nib * scale + min`` with a 4-bit
  ``nib`` and fp16 scale and min per group (ggml's Q4_1, 0.625 bytes a weight). A weight that
  already is Q4_0's (``min = -8 scale``: a Q4_0 GGUF's) is kept so, and the panels (wo_panels.py)
  then keep no min: 0.5625 bytes a weight.

Each scheme has one packed layout and up to four kernels on it, timed against each other per
row bucket by choice.py: the native one (csrc/portable/wo_matmul.c: reads the packed weight once
for all rows, AVX2 or AVX-512 chosen at run time, OpenMP across output rows; a weight row costs
its unpacking again for every input row), ``*-amx`` for bf16 inputs on AMX hosts (csrc/amx/wo_amx.c:
each weight tile unpacked once into bf16 for up to 64 input rows, multiplied by the tile unit),
``*-gemm`` for bf16 inputs on hosts with AVX512-BF16 (wo_gemm.py: panels of the weight unpacked
once into bf16 for every input row, a register-blocked GEMM on its dot product), and
``*-dequant``, which dequantizes a tile of output rows at a time into the engine's dtype and
multiplies it with torch's GEMM (other devices, and hosts where the library cannot be built).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minisgl_core.kernels.matmul.base import Kernel, add_bias_residual
from minisgl_core.kernels.matmul.w8a8 import quantize_weight
from minisgl_core.kernels.native import labelled
from minisgl_core.kernels.native import library as native

log = logging.getLogger(__name__)
GROUP = 32  # inputs per int4 group (fixed in csrc/portable/wo_shared.h)
# float weights get Q4_1 (scale and min per group) rather than Q4_0 (symmetric): on the default
# model's weights its round-trip error is lower (docs/design/kernels.md, 6. Weight-only int8 and
# int4); a weight that is Q4_0's already keeps it (exactly, and without mins in the panels)
Q4_0_SLACK = 1 / 16  # |w / scale - its nearest integer| of a Q4_0 weight in bf16: at most 8 x 2^-8
# what torch.profiler calls the native kernels' time (bench/profile.py counts it as matmul)
PROFILE_NAMES = ("minisgl::wo_int8", "minisgl::wo_int4", "minisgl::wo_amx", "minisgl::wo_gemm",
                 "minisgl::wo_panels")
TILE_ELEMS = 1 << 20  # weights dequantized at a time by the *-dequant kernels (4 MB in fp32)


@dataclass(frozen=True)
class Int8Weight:
    """``q [out, in]`` int8, ``scale [out]`` fp32."""

    q: torch.Tensor
    scale: torch.Tensor


@dataclass(frozen=True)
class Int4Weight:
    """``q [out, groups, 16]`` uint8 (two nibbles a byte, see csrc/portable/wo_matmul.c),
    ``scale`` and ``min`` ``[out, groups]`` fp16; ``in_features`` may be less than
    ``groups * GROUP``; ``symmetric``: Q4_0's, every ``min`` is ``-8 scale``."""

    q: torch.Tensor
    scale: torch.Tensor
    min: torch.Tensor
    in_features: int
    symmetric: bool = False


def q4_0_steps(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_0's fp16 scale of each group of ``w [out, groups, GROUP]`` (its value of largest
    magnitude maps to -8), ``[out, groups]``, and ``w`` in steps of it (fp32, the shape of
    ``w``; a zero group's are zeros)."""
    big = w.gather(2, w.abs().argmax(2, keepdim=True)).squeeze(2)
    scale = (big / -8.0).half()
    s = scale.float()
    return scale, w / s.where(s != 0, torch.ones(()))[..., None]


def on_q4_0_grid(steps: torch.Tensor) -> bool:
    """Whether weights in steps of their Q4_0 scale (``q4_0_steps``) are whole steps -8..7, up
    to a bf16 rounding of each (a Q4_0 GGUF's weights, in the engine's dtype). A float weight's
    are not: each of a group's 31 other values would have to lie within 1/16 of a step."""
    return bool(((steps - steps.round()).abs() <= Q4_0_SLACK).all()
                and (steps <= 7 + Q4_0_SLACK).all())


def is_q4_0(w: torch.Tensor) -> bool:
    """Whether ``w [out, groups, GROUP]`` is a Q4_0 weight (``on_q4_0_grid``)."""
    return on_q4_0_grid(q4_0_steps(w)[1])


def quantize_int4(weight: torch.Tensor, symmetric: bool | None = None) -> Int4Weight:
    """``W [out, in]`` -> groups of GROUP inputs, 4 bits each (the last group zero-padded):
    Q4_0's (``symmetric``) or Q4_1's; None: Q4_0's where the weight is Q4_0's already
    (``is_q4_0``; its first rows tell a float weight cheaply), else Q4_1's."""
    out, inp = weight.shape
    groups = -(-inp // GROUP)
    w = torch.nn.functional.pad(weight.float(), (0, groups * GROUP - inp)).view(out, groups, GROUP)
    if symmetric is None and not is_q4_0(w[:8]):
        symmetric = False
    if symmetric is not False:  # Q4_0: the value of largest magnitude maps to -8
        scale, steps = q4_0_steps(w)
        if symmetric or on_q4_0_grid(steps):
            mins = (-8.0 * scale.float()).half()
            nib = (steps.round_() + 8).clamp_(0, 15).to(torch.uint8)
            q = nib[..., :16] | (nib[..., 16:] << 4)  # [out, groups, 16]
            return Int4Weight(q.contiguous(), scale.contiguous(), mins.contiguous(), inp, True)
    lo = w.amin(2)  # Q4_1: [min, max] onto 0..15
    scale, mins = ((w.amax(2) - lo) / 15.0).half(), lo.half()
    s = scale.float().where(scale != 0, torch.ones(()))  # a constant group: every nib 0
    nib = torch.round((w - mins.float()[..., None]) / s[..., None]).clamp_(0, 15).to(torch.uint8)
    q = nib[..., :16] | (nib[..., 16:] << 4)
    return Int4Weight(q.contiguous(), scale.contiguous(), mins.contiguous(), inp)


def dequantize_int4(w: Int4Weight, rows: slice = slice(None),
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight ``[out, in]`` (or its ``rows``) that ``w`` stands for, in ``dtype``."""
    q = w.q[rows]
    nib = torch.cat((q & 15, q >> 4), 2).to(dtype)  # [rows, groups, 32]
    full = nib * w.scale[rows, :, None].to(dtype) + w.min[rows, :, None].to(dtype)
    return full.flatten(1)[:, :w.in_features]


def dequantize_int8(w: Int8Weight, rows: slice = slice(None),
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight ``[out, in]`` (or its ``rows``) that ``w`` stands for, in ``dtype``."""
    return w.q[rows].to(dtype) * w.scale[rows, None].to(dtype)


def _int4_tile_bf16(w: Int4Weight, rows: slice, dtype: torch.dtype) -> torch.Tensor:
    """``dequantize_int4(w, rows, bf16)`` by csrc/avx512/wo_int4_bf16.c in one pass (rounded
    once, from fp32), else by torch."""
    lib = native.library()
    a, b, _ = rows.indices(w.q.shape[0])
    if lib is not None:
        out = torch.empty(b - a, w.in_features, dtype=torch.bfloat16)
        if lib.wo_int4_dequant_bf16(w.q.data_ptr(), w.scale.data_ptr(), w.min.data_ptr(),
                                    w.in_features, a, b, out.data_ptr(),
                                    torch.get_num_threads()) == 0:
            return out
    return dequantize_int4(w, rows, dtype)


def native_matmul(x: torch.Tensor, w: Int8Weight | Int4Weight, isa: int | None = None
                  ) -> torch.Tensor:
    """``x [T, in] @ dequant(w).T`` -> ``[T, out]`` fp32 by the native library (which must have
    loaded); ``isa``: native.ISAS value (None: the widest this CPU runs)."""
    lib = native.library()
    assert lib is not None, native.failure()
    rows, inp = x.shape
    out = w.q.shape[0]
    y = torch.empty(rows, out)
    threads, path = torch.get_num_threads(), -1 if isa is None else isa
    if isinstance(w, Int4Weight) and x.dtype == torch.bfloat16 and path in (-1, 2):
        # AVX512-BF16's dot product where the CPU has it (csrc/avx512/wo_int4_bf16.c), as the
        # operator does
        xb = x.contiguous()
        if lib.wo_int4_bf16(xb.data_ptr(), rows, inp, w.q.data_ptr(), w.scale.data_ptr(),
                            w.min.data_ptr(), out, y.data_ptr(), threads) == 0:
            return y
    x = x.float().contiguous()
    if isinstance(w, Int8Weight):
        args: tuple[int, ...] = (x.data_ptr(), rows, inp, w.q.data_ptr(), w.scale.data_ptr(),
                                 out, y.data_ptr(), threads, path)
        kernel, name = lib.wo_int8, PROFILE_NAMES[0]
    else:
        args = (x.data_ptr(), rows, inp, w.q.data_ptr(), w.scale.data_ptr(), w.min.data_ptr(),
                out, y.data_ptr(), threads, path)
        kernel, name = lib.wo_int4, PROFILE_NAMES[1]
    labelled.call(name, kernel, *args)
    return y


def amx_matmul(x: torch.Tensor, w: Int8Weight | Int4Weight | torch.Tensor,
               residual: torch.Tensor | None = None, dtype: torch.dtype = torch.float32
               ) -> torch.Tensor | None:
    """``x [T, in] bf16 @ W.T (+ residual)`` -> ``[T, out]`` in ``dtype`` (fp32 or bf16: summed
    in fp32, rounded once) on AMX (csrc/amx/wo_amx.c), W int8 / int4 dequantized or a bf16 HF
    weight ``[out, in]``; None where the library or the CPU has no AMX."""
    lib = native.library()
    if lib is None or x.dtype != torch.bfloat16 or not lib.wo_has_amx():
        return None
    x = x.contiguous()
    rows, inp = x.shape
    res = None if residual is None else residual.to(dtype).contiguous()
    if isinstance(w, torch.Tensor):
        out = w.shape[0]
        kernel, args = lib.wo_amx_bf16, (x.data_ptr(), rows, inp, w.data_ptr())
    else:
        out = w.q.shape[0]
        args = (x.data_ptr(), rows, inp, w.q.data_ptr(), w.scale.data_ptr())
        if isinstance(w, Int4Weight):
            kernel, args = lib.wo_amx_int4, (*args, w.min.data_ptr())
        else:
            kernel = lib.wo_amx_int8
    y = torch.empty(rows, out, dtype=dtype)
    call = (*args, out, y.data_ptr(), int(dtype == torch.bfloat16),
            None if res is None else res.data_ptr(), torch.get_num_threads())
    return y if labelled.call(PROFILE_NAMES[2], kernel, *call) == 0 else None


FusedMatmul = Callable[..., torch.Tensor | None]  # (x, packed, residual, dtype) -> y or None


def fused_run(matmul: FusedMatmul, packed: object, x: torch.Tensor, bias: torch.Tensor | None,
              residual: torch.Tensor | None) -> torch.Tensor:
    """The ``run`` of a native kernel that can add a residual itself: without a bias the
    residual is summed in the kernel, rounded once."""
    fused = residual if bias is None else None
    y = matmul(x, packed, fused, x.dtype)
    assert y is not None, "a native kernel ran where available() said it could not"
    return y if fused is not None else add_bias_residual(y, bias, residual)


def amx_run(packed: Int8Weight | Int4Weight | torch.Tensor, x: torch.Tensor,
            bias: torch.Tensor | None, residual: torch.Tensor | None) -> torch.Tensor:
    """An AMX kernel's ``run``."""
    return fused_run(amx_matmul, packed, x, bias, residual)


class WeightOnlyKernel(Kernel):
    """What the int8-wo and int4 kernels share: the packed layouts and their bytes."""

    scheme = "?"

    def pack(self, weight: torch.Tensor) -> Int8Weight | Int4Weight:
        if self.scheme == "int4":
            return quantize_int4(weight)
        return Int8Weight(*quantize_weight(weight))

    def nbytes(self, packed: Int8Weight | Int4Weight) -> int:
        return sum(int(t.numel() * t.element_size()) for t in
                   (packed.q, packed.scale, *((packed.min,) if self.scheme == "int4" else ())))

    def bf16_self_check(self, matmul: FusedMatmul, what: str, int4_in_bf16: bool) -> bool:
        """Whether ``matmul`` on bf16 inputs gives the dequantized weight's product here (CPU
        and bf16 only); ``int4_in_bf16``: its int4 weight is rounded once to bf16."""
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 40, generator=gen), torch.randn(5, 40, generator=gen)
        packed = self.pack(w)
        y = matmul(x.bfloat16(), packed, None, torch.float32)
        if y is None:
            return False
        deq = dequantize_int4(packed) if self.scheme == "int4" else dequantize_int8(packed)
        if self.scheme == "int4" and int4_in_bf16:
            deq = deq.bfloat16().float()
        ok = torch.allclose(y, x.bfloat16().float() @ deq.t(), rtol=1e-4, atol=1e-4)
        if not ok:
            log.warning("%s %s kernel gives wrong results here: not used", what, self.scheme)
        return ok


class WeightOnlyNative(WeightOnlyKernel):
    """The native kernel (CPU, fp32 or bf16 activations; bf16 converted at the boundary)."""

    def __init__(self, scheme: str) -> None:
        self.name = self.layout = self.scheme = self.quantized = scheme
        # int8 converts bf16 rows to fp32 first; int4 has a bf16 path of its own (AVX512-BF16)
        self.fp32_rows = scheme != "int4"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            return False
        if native.library() is None:
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 40, generator=gen), torch.randn(5, 40, generator=gen)
        packed = self.pack(w)
        deq = dequantize_int4(packed) if self.scheme == "int4" else dequantize_int8(packed)
        ok = torch.allclose(native_matmul(x, packed), x @ deq.t(), rtol=1e-4, atol=1e-4)
        if not ok:
            log.warning("native %s kernel gives wrong results here: not used", self.scheme)
        return ok

    def run(self, packed: Int8Weight | Int4Weight, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        y = native_matmul(x, packed)
        return add_bias_residual(y if x.dtype == torch.float32 else y.to(x.dtype), bias, residual)


class WeightOnlyAmx(WeightOnlyKernel):
    """AMX's tile multiply on weight tiles unpacked into bf16 (CPU with AMX, bf16 inputs)."""

    def __init__(self, scheme: str) -> None:
        self.layout = self.scheme = self.quantized = scheme
        self.name = f"{scheme}-amx"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        # int4 tiles are the fp32 weight rounded once to bf16; int8 ones are exact integers
        return (device.type == "cpu" and dtype == torch.bfloat16
                and self.bf16_self_check(amx_matmul, "AMX", int4_in_bf16=True))

    def run(self, packed: Int8Weight | Int4Weight, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return amx_run(packed, x, bias, residual)


def tiled_matmul(x: torch.Tensor, out: int, step: int,
                 tile: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """``x @ W.t()`` with ``W`` [out, in] built ``step`` output rows at a time by ``tile(a, b)``
    (rows [a, b) of the weight, dequantized), so a whole dequantized weight never exists."""
    parts = [x @ tile(a, min(out, a + step)).t() for a in range(0, out, step)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


class WeightOnlyDequant(WeightOnlyKernel):
    """Dequantize ``TILE_ELEMS`` weights at a time into the input's dtype, then torch's GEMM:
    any device and dtype, and no second copy of the weight."""

    def __init__(self, scheme: str) -> None:
        self.layout = self.scheme = self.quantized = scheme
        self.name = f"{scheme}-dequant"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def run(self, packed: Int8Weight | Int4Weight, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        deq = dequantize_int4 if isinstance(packed, Int4Weight) else dequantize_int8
        if deq is dequantize_int4 and x.dtype == torch.bfloat16 and x.device.type == "cpu":
            deq = _int4_tile_bf16  # one native pass a tile where the CPU has AVX512-BF16
        out, inp = packed.q.shape[0], x.shape[1]
        y = tiled_matmul(x, out, max(1, TILE_ELEMS // inp),
                         lambda a, b: deq(packed, slice(a, b), x.dtype))
        return add_bias_residual(y, bias, residual)
