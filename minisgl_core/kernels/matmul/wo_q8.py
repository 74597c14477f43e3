"""int4 weights against int8 inputs (ggml's Q4_1 x Q8_1) on AVX512-VNNI's dot product
(csrc/avx512/wo_int4_q8.c) or AVX2's (csrc/avx2/wo_int4_q8_avx2.c), for the few rows of a
decode step.

Each input row is quantized at the call in groups of 32 (``d = max|x| / 127``, ``qx =
round(x / d)``), and each group's product with the weight's is summed as integers, 64 byte
products an instruction: the fp32 and bf16 kernels turn every nibble into a float first, and at
one row that conversion, not the memory, set their speed. The inputs' rounding (at most half of
``d`` an input) is of the size of bf16's (2**-9 of the value); the kernel choice takes this
kernel only for the row buckets where it measures fastest.
"""

from __future__ import annotations

import torch

from minisgl_core.kernels.matmul.weight_only import (
    GROUP,
    PROFILE_NAMES,
    Int4Weight,
    WeightOnlyKernel,
    dequantize_int4,
    fused_run,
)
from minisgl_core.kernels.native import library as native


def q8_rows(x: torch.Tensor) -> torch.Tensor:
    """What the kernel computes with in place of ``x [T, in]``: each row's groups of GROUP
    inputs rounded to ``qx * d`` as csrc/avx512/wo_int4_q8.c rounds them (fp32 arithmetic,
    ties to even); fp32 ``[T, in]``."""
    rows, inp = x.shape
    groups = -(-inp // GROUP)
    g = torch.nn.functional.pad(x.float(), (0, groups * GROUP - inp)).view(rows, groups, GROUP)
    amax = g.abs().amax(2, keepdim=True)
    # 127 / amax as a division (``127.0 / tensor`` is a reciprocal times 127, rounded twice)
    inv = torch.where(amax > 0, torch.full_like(amax, 127.0) / amax, torch.zeros(()))
    q = torch.round(g * inv).clamp_(-127, 127)
    return (q * (amax / 127.0)).flatten(1)[:, :inp]


def q8_matmul(x: torch.Tensor, w: Int4Weight, residual: torch.Tensor | None = None,
              dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """``q8_rows(x) [T, in] @ dequant(w).T (+ residual)`` -> ``[T, out]`` in ``dtype`` (fp32 or
    bf16: summed in fp32, rounded once); x fp32 or bf16. None where the library or the CPU
    cannot."""
    lib = native.library()
    if lib is None or x.dtype not in (torch.float32, torch.bfloat16):
        return None
    x = x.contiguous()
    rows, inp = x.shape
    out = w.q.shape[0]
    res = None if residual is None else residual.to(dtype).contiguous()
    y = torch.empty(rows, out, dtype=dtype)
    args = (x.data_ptr(), int(x.dtype == torch.bfloat16), rows, inp, w.q.data_ptr(),
            w.scale.data_ptr(), w.min.data_ptr(), out, y.data_ptr(),
            int(dtype == torch.bfloat16), None if res is None else res.data_ptr(),
            torch.get_num_threads())
    if torch.autograd._profiler_enabled():  # torch.profiler cannot see into a ctypes call
        with torch.profiler.record_function(PROFILE_NAMES[4]):
            return y if lib.wo_int4_q8(*args) == 0 else None
    return y if lib.wo_int4_q8(*args) == 0 else None


class WeightOnlyQ8(WeightOnlyKernel):
    """int4 weights, inputs quantized to int8 per group of 32 at the call (CPU with AVX2 or
    AVX512-VNNI, fp32 or bf16 inputs)."""

    def __init__(self, scheme: str = "int4") -> None:
        assert scheme == "int4", "int8 inputs are for the int4 scheme"
        self.layout = self.scheme = self.quantized = scheme
        self.name = f"{scheme}-q8"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 72, generator=gen), torch.randn(5, 72, generator=gen)
        packed = self.pack(w)
        y = q8_matmul(x, packed)
        if y is None:
            return False
        want = q8_rows(x).double() @ dequantize_int4(packed).double().t()
        return torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4)

    def run(self, packed: Int4Weight, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return fused_run(q8_matmul, packed, x, bias, residual)
