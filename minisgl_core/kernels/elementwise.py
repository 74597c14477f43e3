"""The decoder layer's elementwise steps in one native pass each (csrc/elementwise.c), for the
eager step: RMSNorm, the rotary embedding and SwiGLU. Each returns None where the native library
or the tensors' dtype, device or layout do not fit; the caller then runs torch's ops."""

from __future__ import annotations

import torch

from minisgl_core.kernels.native import labelled
from minisgl_core.kernels.native import library as native

_DTYPES = (torch.float32, torch.bfloat16)
ENABLED = True  # False: every call declines (benchmarks/elementwise.py runs torch's ops so)
# the profiler's names for the rotary and SwiGLU passes (bench/profile.py's groups): it cannot
# see into a ctypes call (the RMSNorm's pass runs under the decoder's own label)
ROPE, SWIGLU = "minisgl::rope", "minisgl::swiglu"


def _fits(x: torch.Tensor) -> bool:
    """Whether ``x`` (rows of contiguous elements) can go to the library here."""
    return ENABLED and x.device.type == "cpu" and x.dtype in _DTYPES and x.stride(-1) == 1


def rms_norm(x: torch.Tensor, weight32: torch.Tensor, eps: float) -> torch.Tensor | None:
    """RMSNorm of ``x [T, H]`` times ``weight32`` (fp32 ``[H]``) -> ``[T, H]`` in x's dtype."""
    lib = native.library()
    if lib is None or not _fits(x) or x.dim() != 2 or weight32.dtype != torch.float32:
        return None
    rows, width = x.shape
    y = torch.empty(rows, width, dtype=x.dtype)
    done = lib.rms_norm_rows(x.data_ptr(), x.stride(0), rows, width, weight32.data_ptr(), eps,
                             y.data_ptr(), int(x.dtype == torch.bfloat16),
                             torch.get_num_threads(), native.best_isa())
    return y if done == 0 else None


def rope(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor | None:
    """The rotary embedding of ``qk [T, H, D]`` (heads contiguous, rows any stride) with ``cos``
    and ``sin [T, 1, D]`` (sin's first half negated) -> ``[T, H, D]``, contiguous."""
    lib = native.library()
    if (lib is None or not _fits(qk) or qk.dim() != 3 or qk.stride(1) != qk.shape[2]
            or cos.dtype != qk.dtype or sin.dtype != qk.dtype
            or not cos.is_contiguous() or not sin.is_contiguous()):
        return None
    rows, heads, dim = qk.shape
    y = torch.empty(rows, heads, dim, dtype=qk.dtype)
    done = labelled.call(ROPE, lib.rope_rows, qk.data_ptr(), qk.stride(0), rows, heads, dim,
                         cos.data_ptr(), sin.data_ptr(), y.data_ptr(),
                         int(qk.dtype == torch.bfloat16), torch.get_num_threads(),
                         native.best_isa())
    return y if done == 0 else None


def swiglu(gate_up: torch.Tensor) -> torch.Tensor | None:
    """``silu(gate) * up`` of ``gate_up [T, 2 I]`` (contiguous) -> ``[T, I]``."""
    lib = native.library()
    if lib is None or not _fits(gate_up) or gate_up.dim() != 2 or not gate_up.is_contiguous():
        return None
    rows, inter = gate_up.shape[0], gate_up.shape[1] // 2
    y = torch.empty(rows, inter, dtype=gate_up.dtype)
    done = labelled.call(SWIGLU, lib.swiglu_rows, gate_up.data_ptr(), rows, inter,
                         y.data_ptr(), int(gate_up.dtype == torch.bfloat16),
                         torch.get_num_threads(), native.best_isa())
    return y if done == 0 else None
