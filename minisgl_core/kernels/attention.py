"""Decode attention over the paged KV cache: read from the pages in place by the native kernel
(csrc/paged_attention.c), else gathered into buffers for SDPA. In place, each key and value is
read once, not three times.

On a 2-core AMX Xeon it measured 1.9-2.8x faster than gather + SDPA in fp32 and 1.0-1.5x in
bf16, from 1 x 128 to 128 x 256 keys (``benchmarks/decode_attention.py``; docs/design/kernels.md,
11. Decode attention read in place).
"""

from __future__ import annotations

import ctypes
import os

import torch
import torch.nn.functional as F

from minisgl_core.kernels import kv_int8
from minisgl_core.kernels.native import library as native

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


def usable(q: torch.Tensor, cache: torch.Tensor) -> bool:
    """Whether the native kernel takes this step: CPU, fp32 or bf16 (the cache the same, or
    packed int8: kv_int8.py), the library built, and not switched off
    (``MINISGL_ATTENTION=sdpa``)."""
    return (q.device.type == "cpu" and q.dtype in _DTYPES
            and (cache.dtype == q.dtype or kv_int8.is_int8(cache))
            and os.environ.get("MINISGL_ATTENTION", "native") != "sdpa"
            and native.library() is not None)


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           kv_index: torch.Tensor, mask: torch.Tensor | None, scale: float,
           isa: int | None = None) -> torch.Tensor | None:
    """``q [B, Hq, D]``, caches ``[slots, Hkv, D]`` (packed int8: ``[slots, Hkv, D + 2]``),
    ``kv_index [B * L]`` slots, ``mask [B, 1, 1, L]`` (None: all visible) -> ``[B, Hq * D]``;
    None when the kernel does not take these sizes (the caller falls back to SDPA). ``isa``:
    native.ISAS (None: the widest here)."""
    lib = native.library()
    assert lib is not None
    b, hq, d = q.shape
    hkv = k_cache.shape[1]
    length = kv_index.shape[0] // b
    q = q.contiguous()
    valid = None if mask is None else mask.reshape(b, length).contiguous()
    out = torch.empty((b, hq * d), dtype=q.dtype, device=q.device)
    entry = lib.pa_decode_int8 if kv_int8.is_int8(k_cache) else lib.pa_decode
    done = entry(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                         kv_index.data_ptr(), None if valid is None else valid.data_ptr(),
                         b, length, hq, hkv, d, ctypes.c_float(scale), _DTYPES[q.dtype],
                         out.data_ptr(), native.best_isa() if isa is None else isa)
    return out if done == 0 else None


class Workspace:
    """Reusable gather buffers: fresh large allocations each layer would page-fault every step."""

    def __init__(self, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        self._shape = (num_kv_heads, head_dim)
        self._dtype, self._device = dtype, device
        self._k = self._v = torch.empty((0, *self._shape), dtype=dtype, device=device)
        self._masks: list[tuple[torch.Tensor, torch.Tensor]] = []  # (bool mask, its additive)

    def buffers(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Two ``[n, Hkv, D]`` buffers (views of storage kept across steps)."""
        if n > self._k.shape[0]:
            size = max(n, int(self._k.shape[0] * 1.5))
            self._k = torch.empty((size, *self._shape), dtype=self._dtype, device=self._device)
            self._v = torch.empty((size, *self._shape), dtype=self._dtype, device=self._device)
        return self._k[:n], self._v[:n]

    def additive(self, mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
        """A bool ``mask`` (True: attend) as SDPA's additive one in ``dtype`` (0 or -inf, what
        SDPA makes of a bool mask itself), made once for all the layers of a step: SDPA would
        convert it again at every call (0.14 of 2.07 ms a call at 488 x 1000, bf16)."""
        if mask is None:
            return None
        for src, bias in self._masks:
            if src is mask and bias.dtype == dtype:
                return bias
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        bias.masked_fill_(~mask, float("-inf"))
        self._masks = [*self._masks[-3:], (mask, bias)]  # a step's few groups; kept alive: ``is``
        return bias


def gathered(cache: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None, b: int,
              length: int) -> torch.Tensor:
    """Gather slots (into ``out`` when given) and view them as ``[B, Hkv, L, D]``. A packed int8
    cache's rows are gathered, then dequantized (into ``out``, whose dtype they take; without
    ``out``: fp32): only the slots asked for, never the pool."""
    if kv_int8.is_int8(cache):
        rows = kv_int8.dequantize(torch.index_select(cache, 0, index),
                                  torch.float32 if out is None else out.dtype)
        if out is not None:
            out.copy_(rows)
            rows = out
        return rows.view(b, length, *rows.shape[1:]).transpose(1, 2)
    if out is None:
        out = torch.index_select(cache, 0, index)
    else:
        torch.index_select(cache, 0, index, out=out)
    return out.view(b, length, *out.shape[1:]).transpose(1, 2)


def sdpa_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                kv_index: torch.Tensor, mask: torch.Tensor | None, scale: float,
                ws: Workspace | None = None) -> torch.Tensor:
    """Decode attention by gathering the keys and values (``kv_index [B * L]``) into buffers
    (``ws``'s, or new ones) for SDPA: ``q [B, Hq, D]`` -> ``[B, Hq * D]``."""
    b, hq, d = q.shape
    length = kv_index.shape[0] // b
    kb, vb = (None, None) if ws is None else ws.buffers(b * length)
    if kb is None and kv_int8.is_int8(k_cache):  # dequantized to q's dtype, SDPA's want
        kb, vb = (torch.empty((b * length, k_cache.shape[1], d), dtype=q.dtype, device=q.device)
                  for _ in range(2))
    keys = gathered(k_cache, kv_index, kb, b, length)
    vals = gathered(v_cache, kv_index, vb, b, length)
    o = F.scaled_dot_product_attention(q.unsqueeze(2), keys, vals, attn_mask=mask,
                                       enable_gqa=True, scale=scale)  # [B, Hq, 1, D]
    return o.view(b, hq * d)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     kv_index: torch.Tensor, mask: torch.Tensor | None, scale: float,
                     ws: Workspace | None = None) -> torch.Tensor:
    """``sdpa_decode``'s result, from the native kernel (pages read in place: faster at every
    size measured) where it runs and takes these sizes."""
    if usable(q, k_cache):
        out = decode(q, k_cache, v_cache, kv_index, mask, scale)
        if out is not None:
            return out
    return sdpa_decode(q, k_cache, v_cache, kv_index, mask, scale, ws)
