"""Decode attention read from the KV pages in place (csrc/paged_attention.c), instead of
gathering every key and value into a buffer for SDPA: each is then read once, not three times."""

from __future__ import annotations

import ctypes

import torch

from minisgl_core.engine import native

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
# bf16 keys a step reads (batch x context) above which gather + SDPA beat the kernel: SDPA's bf16
# path gains with length (2-core AMX Xeon, 9 query / 3 KV heads of 64: kernel 271 vs 498 us at
# 32 x 128, 799 vs 803 at 32 x 256, 1261 vs 1098 at 32 x 384); in fp32 the kernel won at every
# size measured (up to 32 x 512: 1518 vs 2217 us)
BF16_MAX_KEYS = 8192


def usable(q: torch.Tensor, cache: torch.Tensor) -> bool:
    """Whether the native kernel takes this step: CPU, fp32 or bf16, the library built, and
    not switched off (``MINISGL_ATTENTION=sdpa``)."""
    import os

    return (q.device.type == "cpu" and q.dtype in _DTYPES and cache.dtype == q.dtype
            and os.environ.get("MINISGL_ATTENTION", "native") != "sdpa"
            and native.library() is not None)


def faster(dtype: torch.dtype, keys: int) -> bool:
    """Whether the kernel beats gather + SDPA for ``keys`` (batch x context) of ``dtype``."""
    return dtype != torch.bfloat16 or keys <= BF16_MAX_KEYS


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
