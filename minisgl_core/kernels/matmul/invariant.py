"""The batch-invariant matmul that ``--deterministic`` runs for every unquantized Linear.

csrc/batch_invariant/matmul.c computes each output as one fixed-order fp32 dot product of its
row and a weight row (HF layout, kept as it is: a tied LM head shares the embedding table), so
a row's result has the same bits whether it is computed alone, among 31 other rows or in a
512-row prefill chunk. oneDNN and MKL pick their blocking (and so the order of each sum) by
row count, which is why ``--deterministic`` does not use them. The same kernel runs every row
bucket; ``deterministic_choice`` gives it to every role (docs/speculative.md says what the mode
promises).
"""

from __future__ import annotations

import torch

from minisgl_core.kernels.matmul.base import BUCKETS, Kernel, add_bias_residual
from minisgl_core.kernels.matmul.weight_only import (
    Int4Weight,
    Int8Weight,
    WeightOnlyNative,
    native_matmul,
)
from minisgl_core.kernels.native import library as native

_BF16 = {torch.float32: 0, torch.bfloat16: 1}
# the weight-only schemes whose native kernel (csrc/*/wo_matmul*.c) computes each row alone, in
# an order that does not depend on the row count (tests/kernels/test_batch_invariant.py checks)
# on the paths WeightOnlyInvariant takes
INVARIANT_SCHEMES = ("int8-wo", "int4")


class Invariant(Kernel):
    """``x [T, in] @ W.T`` with each row's result independent of ``T`` (fp32 or bf16, CPU)."""

    name = "invariant"
    layout = "hf"
    shares_weight = True

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return device.type == "cpu" and dtype in _BF16 and native.library() is not None

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.contiguous()  # [out, in]: the same tensor when it is contiguous

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        lib = native.library()
        assert lib is not None, native.failure()
        rows, inp = x.shape
        out = packed.shape[0]
        x = x.to(packed.dtype).contiguous()
        y = torch.empty(rows, out, dtype=packed.dtype)
        extra = [None if t is None else t.to(packed.dtype).contiguous() for t in (bias, residual)]
        done = lib.bi_matmul(x.data_ptr(), rows, inp, packed.data_ptr(), out,
                             None if extra[0] is None else extra[0].data_ptr(),
                             None if extra[1] is None else extra[1].data_ptr(),
                             y.data_ptr(), _BF16[packed.dtype], native.best_isa())
        if done != 0:
            raise RuntimeError(f"bi_matmul refused {rows} x {inp} @ {out}")
        return y


class WeightOnlyInvariant(WeightOnlyNative):
    """The native weight-only kernel on its row-count-invariant paths, from Python (the C++
    operator picks its own paths): int4 at most AVX2, whose rows all take the per-group path
    (the AVX-512 path blocks a lone fp32 row differently from two or more)."""

    def __init__(self, scheme: str) -> None:
        super().__init__(scheme)
        self.name = f"{scheme}-invariant"

    def run(self, packed: Int8Weight | Int4Weight, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        isa = native.best_isa()
        y = native_matmul(x, packed, min(isa, 1) if isinstance(packed, Int4Weight) else isa)
        return add_bias_residual(y if x.dtype == torch.float32 else y.to(x.dtype), bias, residual)


def deterministic_kernels(role_schemes: dict[str, str | None], device: torch.device,
                          dtype: torch.dtype) -> dict[str, tuple[Kernel, ...]]:
    """Each role's kernel for every bucket under ``--deterministic``: ``Invariant`` for the
    unquantized roles, the native weight-only kernel for int8-wo and int4 ones; ValueError for
    what has none (W8A8 int8, another device, a host without the native library)."""
    out: dict[str, tuple[Kernel, ...]] = {}
    for role, scheme in role_schemes.items():
        kernel: Kernel
        if scheme is None:
            kernel = Invariant()
        elif scheme in INVARIANT_SCHEMES:
            kernel = WeightOnlyInvariant(scheme)
        else:
            raise ValueError(f"--deterministic has no batch-invariant kernel for --quantization "
                             f"{scheme} (it has for none, int8-wo and int4)")
        if not kernel.available(device, dtype):
            raise ValueError(f"--deterministic needs the native kernels on the CPU in float32 "
                             f"or bfloat16 ({role}: {kernel.name} unavailable here: "
                             f"{native.failure() or device.type + ', ' + str(dtype)})")
        out[role] = (kernel,) * len(BUCKETS)
    return out
