"""Matmul kernels for the model's linear layers, picked once at load time.

Measured on this project's 2-core x86 machine (fp32, CPU time per forward of SmolLM2's layers):
oneDNN with weights pre-packed into its blocked layout beats MKL's ``F.linear`` by 1.2-1.9x at
4..512 rows (decode batches and prefill chunks), but is slower for 1-3 rows, so those are padded
to 4. Elsewhere (CUDA, builds without oneDNN) weights are kept dense and transposed, which on
CPU also streams them faster than ``F.linear`` at batch 1. ``MINISGL_LINEAR=dense|onednn``
overrides the choice.
"""

from __future__ import annotations

import logging
import os

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)
_MIN_ROWS = 4  # oneDNN's kernels for 1-3 rows are slower than for 4


def _onednn_works(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cpu" or dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(8, 8), 32)
        y = torch.ops.mkldnn._linear_pointwise(torch.ones(4, 8), w, None, "none", [], "")
        return bool(torch.allclose(y, torch.full((4, 8), 8.0)))
    except (RuntimeError, AttributeError) as exc:
        log.info("oneDNN linear unavailable (%s); using dense matmuls", exc)
        return False


def choose_backend(device: torch.device, dtype: torch.dtype) -> str:
    """"onednn" or "dense" for this device and dtype (MINISGL_LINEAR overrides)."""
    forced = os.environ.get("MINISGL_LINEAR", "").strip().lower()
    if forced in ("dense", "onednn"):
        if forced == "onednn" and not _onednn_works(device, dtype):
            raise RuntimeError("MINISGL_LINEAR=onednn but oneDNN linear does not work here")
        return forced
    return "onednn" if _onednn_works(device, dtype) else "dense"


def padded_rows(rows: int) -> int:
    """Round a row count up to one of a few sizes: oneDNN caches one primitive per shape, and an
    unbounded set of shapes (every batch size, every prefill chunk) grows memory without end.
    4 (fewer is slower), then multiples of 8 up to 64, then multiples of 32."""
    if rows <= _MIN_ROWS:
        return _MIN_ROWS
    step = 8 if rows <= 64 else 32
    return -(-rows // step) * step


class Linear:
    """``y = x @ W.T + b`` for ``x [T, in]``, from an HF ``W [out, in]``; the layout is private."""

    __slots__ = ("backend", "bias", "in_features", "out_features", "weight")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, backend: str) -> None:
        self.out_features, self.in_features = weight.shape
        self.backend = backend
        self.bias = bias
        if backend == "onednn":
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 32)
        else:
            self.weight = weight.t().contiguous()  # [in, out]

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + b``, plus ``residual [T, out]`` when given (fused into the matmul)."""
        if self.backend == "onednn":
            rows = x.shape[0]
            padded = padded_rows(rows)  # a bounded set of shapes: see padded_rows
            if padded != rows:
                x = F.pad(x, (0, 0, 0, padded - rows))
                if residual is not None:
                    residual = F.pad(residual, (0, 0, 0, padded - rows))
            if residual is None:
                y = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
            else:
                y = torch.ops.mkldnn._linear_pointwise.binary(x, residual, self.weight,
                                                              self.bias, "add")
            return y if padded == rows else y[:rows]
        if self.bias is not None:
            y = torch.addmm(self.bias, x, self.weight)
            return y if residual is None else y + residual
        return torch.mm(x, self.weight) if residual is None else torch.addmm(residual, x,
                                                                             self.weight)

    def nbytes(self) -> int:
        """Memory held by the weight (and bias)."""
        n = self.in_features * self.out_features * 4  # fp32 whatever the layout
        return n + (0 if self.bias is None else self.bias.numel() * self.bias.element_size())
