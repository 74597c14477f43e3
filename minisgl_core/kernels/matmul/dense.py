"""The unquantized kernels (fp32, or bf16 where the CPU computes it natively): dense ``torch.mm``
on either weight layout and oneDNN on its pre-packed blocked layout.

On one 2-core AVX2 host dense ``torch.mm`` beat oneDNN's pre-packed weights at 1 row (27.4 vs
21.4 tok/s) and lost at 32 (193 vs 267): the choice is measured per host and bucket (choice.py).
"""

from __future__ import annotations

import logging
import platform

import torch
import torch.nn.functional as F

from minisgl_core.kernels import cpu_features
from minisgl_core.kernels.matmul.base import _MIN_ROWS, Kernel, padded_rows

log = logging.getLogger(__name__)


def _mm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
        residual: torch.Tensor | None) -> torch.Tensor:
    """``x [T, in] @ w [in, out] (+ bias) (+ residual)``, the adds fused into the BLAS call."""
    if bias is not None:
        y = torch.addmm(bias, x, w)
        return y if residual is None else y + residual
    return torch.mm(x, w) if residual is None else torch.addmm(residual, x, w)


class Dense(Kernel):
    """``torch.mm`` on the transposed weight ``[in, out]``: any device, any dtype."""

    name = layout = "dense"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.t().contiguous()  # [in, out]

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return _mm(x, packed, bias, residual)


class DenseHF(Kernel):
    """``torch.mm`` on the HF weight ``[out, in]`` as it is (BLAS reads it transposed): no copy,
    so a tied LM head and the embedding lookup share one table."""

    name = "dense-hf"
    layout = "hf"
    shares_weight = True

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.contiguous()  # [out, in]: the same tensor when it is contiguous

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return _mm(x, packed.t(), bias, residual)


def bf16_fast() -> bool:
    """Whether oneDNN computes bf16 natively here (AVX512-BF16 or AMX, and not masked off by
    MINISGL_CPU_FEATURES): on an AVX2-only host its bf16 matmul is emulated, hundreds of times
    slower than fp32, and never a candidate."""
    if platform.machine() in ("x86_64", "AMD64") and not cpu_features.has("avx512_bf16"):
        return False
    try:
        return bool(torch.backends.mkldnn.is_available()
                    and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (RuntimeError, AttributeError):
        return False


class OneDNN(Kernel):
    """oneDNN with the weight pre-packed into its blocked layout (CPU, fp32, or bf16 where the
    host has AVX512-BF16/AMX), rows padded to a bounded set of sizes; ``minimum`` is the fewest
    rows it runs (1-3 rows padded up to it)."""

    layout = "onednn"

    def __init__(self, name: str = "onednn", minimum: int = _MIN_ROWS) -> None:
        self.name, self.minimum = name, minimum

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            return False
        if not torch.backends.mkldnn.is_available():
            return False
        if dtype == torch.bfloat16 and not bf16_fast():
            return False
        try:
            w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(8, 8, dtype=dtype), 32)
            x = torch.ones(4, 8, dtype=dtype)
            y = torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
            return bool(torch.allclose(y.float(), torch.full((4, 8), 8.0)))
        except (RuntimeError, AttributeError) as exc:
            log.info("oneDNN linear unavailable (%s)", exc)
            return False

    def same_as(self, rows: int) -> str | None:
        return None if self.name == "onednn" or rows < _MIN_ROWS else "onednn"

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 32)

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        rows = x.shape[0]
        padded = padded_rows(rows, self.minimum)  # a bounded set of shapes: see padded_rows
        if padded != rows:
            x = F.pad(x, (0, 0, 0, padded - rows))
            if residual is not None:
                residual = F.pad(residual, (0, 0, 0, padded - rows))
        if residual is None:
            y = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
        else:
            y = torch.ops.mkldnn._linear_pointwise.binary(x, residual, packed, bias, "add")
        return y if padded == rows else y[:rows]

    def nbytes(self, packed: torch.Tensor) -> int:
        # an opaque tensor: its dtype's bytes per weight whatever the blocking
        return int(packed.numel() * (2 if packed.dtype == torch.bfloat16 else 4))


class OneDNNHF(OneDNN):
    """oneDNN on the HF weight ``[out, in]`` as it is (no pre-packing, no copy): slower than the
    packed layout from 4 rows up, faster than ``dense-hf`` there (5.5 vs 8.0 ms for the default
    model's LM head at 8 rows, on a 2-core Xeon); for a tied LM head."""

    layout = "hf"
    shares_weight = True

    def __init__(self) -> None:
        super().__init__("onednn-hf", 1)

    def same_as(self, rows: int) -> str | None:
        return None

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.contiguous()


