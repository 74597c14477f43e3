"""Weight-only int8 / int4 matmuls as a GEMM on AVX512-BF16 (csrc/avx512/wo_gemm_bf16.c), for
bf16 inputs of many rows: each panel of 48 output rows is dequantized once into bf16 and every
input row runs over it, so the unpacking is paid once per call where the dot-product kernels
(weight_only.py's native one) pay it again for every row. On hosts with AVX512-BF16 and no
AMX (AMD Zen 4/5) the kernel choice takes it from 8 rows up where it measures it fastest."""

from __future__ import annotations

import torch

from minisgl_core.kernels.matmul.weight_only import (
    PROFILE_NAMES,
    Int4Weight,
    Int8Weight,
    WeightOnlyKernel,
    fused_run,
)
from minisgl_core.kernels.native import labelled
from minisgl_core.kernels.native import library as native


def gemm_matmul(x: torch.Tensor, w: Int8Weight | Int4Weight,
                residual: torch.Tensor | None = None, dtype: torch.dtype = torch.float32
                ) -> torch.Tensor | None:
    """``x [T, in] bf16 @ dequant(w).T (+ residual)`` -> ``[T, out]`` in ``dtype`` (fp32 or bf16:
    summed in fp32, rounded once) by csrc/avx512/wo_gemm_bf16.c (weight panels dequantized once
    into bf16 for every row, AVX512-BF16's dot product); None where the library or the CPU
    cannot."""
    lib = native.library()
    if lib is None or x.dtype != torch.bfloat16 or not lib.wo_has_bf16():
        return None
    x = x.contiguous()
    rows, inp = x.shape
    out = w.q.shape[0]
    res = None if residual is None else residual.to(dtype).contiguous()
    y = torch.empty(rows, out, dtype=dtype)
    tail = (out, y.data_ptr(), int(dtype == torch.bfloat16),
            None if res is None else res.data_ptr(), torch.get_num_threads())
    if isinstance(w, Int4Weight):
        kernel, args = lib.wo_gemm_int4_bf16, (x.data_ptr(), rows, inp, w.q.data_ptr(),
                                               w.scale.data_ptr(), w.min.data_ptr(), *tail)
    else:
        kernel, args = lib.wo_gemm_int8_bf16, (x.data_ptr(), rows, inp, w.q.data_ptr(),
                                               w.scale.data_ptr(), *tail)
    return y if labelled.call(PROFILE_NAMES[3], kernel, *args) == 0 else None


class WeightOnlyGemm(WeightOnlyKernel):
    """A register-blocked GEMM on weight panels dequantized once into bf16 (CPU with
    AVX512-BF16, bf16 inputs): the unpacking is paid once per call, not once per input row."""

    def __init__(self, scheme: str) -> None:
        self.layout = self.scheme = self.quantized = scheme
        self.name = f"{scheme}-gemm"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        # the int4 weight is exact here: 1 + nib/16 in bf16, each group's scale and min in fp32
        return (device.type == "cpu" and dtype == torch.bfloat16
                and self.bf16_self_check(gemm_matmul, "AVX512-BF16 GEMM", int4_in_bf16=False))

    def serves(self, rows: int) -> bool:
        # one or two rows pay the panel unpacking for nothing: 3-5x the dot-product kernel there
        return rows > 2

    def run(self, packed: Int8Weight | Int4Weight, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return fused_run(gemm_matmul, packed, x, bias, residual)
