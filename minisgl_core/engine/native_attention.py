"""Decode attention read from the KV pages in place (csrc/paged_attention.c), instead of
gathering every key and value into a buffer for SDPA: each is then read once, not three times.

On a 2-core AMX Xeon it measured 1.9-2.8x faster than gather + SDPA in fp32 and 1.0-1.5x in
bf16, from 1 x 128 to 128 x 256 keys (``benchmarks/decode_attention.py``, docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import os

import torch

from minisgl_core.engine import native

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


def usable(q: torch.Tensor, cache: torch.Tensor) -> bool:
    """Whether the native kernel takes this step: CPU, fp32 or bf16, the library built, and
    not switched off (``MINISGL_ATTENTION=sdpa``)."""
    return (q.device.type == "cpu" and q.dtype in _DTYPES and cache.dtype == q.dtype
            and os.environ.get("MINISGL_ATTENTION", "native") != "sdpa"
            and native.library() is not None)


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           kv_index: torch.Tensor, mask: torch.Tensor | None, scale: float,
           isa: int | None = None) -> torch.Tensor | None:
    """``q [B, Hq, D]``, caches ``[slots, Hkv, D]``, ``kv_index [B * L]`` slots, ``mask
    [B, 1, 1, L]`` (None: all visible) -> ``[B, Hq * D]``; None when the kernel does not take
    these sizes (the caller falls back to SDPA). ``isa``: native.ISAS (None: the widest here)."""
    lib = native.library()
    assert lib is not None
    b, hq, d = q.shape
    hkv = k_cache.shape[1]
    length = kv_index.shape[0] // b
    q = q.contiguous()
    valid = None if mask is None else mask.reshape(b, length).contiguous()
    out = torch.empty((b, hq * d), dtype=q.dtype, device=q.device)
    done = lib.pa_decode(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                         kv_index.data_ptr(), None if valid is None else valid.data_ptr(),
                         b, length, hq, hkv, d, ctypes.c_float(scale), _DTYPES[q.dtype],
                         out.data_ptr(), native.best_isa() if isa is None else isa)
    return out if done == 0 else None
