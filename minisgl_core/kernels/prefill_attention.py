"""A prefill chunk's causal attention over one sequence by the native kernel
(csrc/avx512/prefill_attention.c, bf16 on AVX512-BF16), where it measured faster than torch's
SDPA for the model's heads on this host: measured once a process per head shape (the engine
does it as it loads), since SDPA's own kernel is fast on some hosts (AMX's tiles) and slow on
others (61 GFLOP/s on Zen 4).
"""

from __future__ import annotations

import ctypes
import os
import time

import torch
import torch.nn.functional as F

from minisgl_core.kernels.native import library as native

_faster: dict[tuple[int, int, int], bool] = {}  # (Hq, Hkv, D) -> native faster than SDPA here


def _fits(x: torch.Tensor) -> bool:
    """``[rows, heads, D]`` of bf16 on the CPU, each row's heads contiguous."""
    return (x.device.type == "cpu" and x.dtype == torch.bfloat16 and x.dim() == 3
            and x.stride(2) == 1 and x.stride(1) == x.shape[2])


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor | None:
    """``q [n, Hq, D]`` at positions ``S - n ..`` against ``k, v [S, Hkv, D]`` (keys 0 .. S - 1),
    causal -> ``[n, Hq * D]``; None where the kernel does not take them."""
    lib = native.library()
    if lib is None or not (_fits(q) and _fits(k) and _fits(v)):
        return None
    n, hq, d = q.shape
    s, hkv = k.shape[0], k.shape[1]
    out = torch.empty((n, hq * d), dtype=q.dtype)
    done = lib.prefill_attention(q.data_ptr(), q.stride(0), k.data_ptr(), k.stride(0),
                                 v.data_ptr(), v.stride(0), n, s, hq, hkv, d,
                                 ctypes.c_float(scale), out.data_ptr(), torch.get_num_threads())
    return out if done == 0 else None


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    n, hq, d = q.shape
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                       v.transpose(0, 1)[None], is_causal=True,
                                       enable_gqa=True, scale=scale)
    return o[0].transpose(0, 1).reshape(n, hq * d)


def preferred(hq: int, hkv: int, d: int, dtype: torch.dtype) -> bool:
    """Whether a prefill of these heads goes to the native kernel: bf16, the library built, not
    switched off (``MINISGL_ATTENTION=sdpa``), and faster than SDPA at a 256-row causal chunk
    (measured at the first call, best of 4 each, interleaved)."""
    if (dtype != torch.bfloat16 or os.environ.get("MINISGL_ATTENTION", "native") == "sdpa"
            or native.library() is None):
        return False
    key = (hq, hkv, d)
    if key not in _faster:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(256, h, d, generator=gen).bfloat16() for h in (hq, hkv, hkv))
        if run(q, k, v, d ** -0.5) is None:
            _faster[key] = False
        else:
            best = {True: float("inf"), False: float("inf")}
            for _ in range(4):  # interleaved: a busy moment slows both alike
                for use in best:
                    start = time.perf_counter()
                    (run if use else _sdpa)(q, k, v, d ** -0.5)
                    best[use] = min(best[use], time.perf_counter() - start)
            _faster[key] = best[True] < best[False]
    return _faster[key]
