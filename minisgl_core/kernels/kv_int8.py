"""The int8 KV cache's row format: int8 values and their fp16 scale, packed per (token, head).

A pool of ``--kv-cache-dtype int8`` holds each token's keys (and values) per KV head as one row
of ``D + 2`` bytes: ``D`` int8 values, then the fp16 scale's two bytes (little-endian), so that
``value = int8 * scale``. The scale is the row's absolute maximum / 127 (symmetric, per token and
head). One packed tensor, not values and scales apart: whatever moves pages (index_copy_, the
disk tier's byte copies, tensor-parallel shards) moves the scales with them. At ``D = 64`` a row
is 66 bytes against bf16's 128 and fp32's 256. The C kernel reads the same layout
(csrc/paged_attention.c, ``pa_decode_int8``).
"""

from __future__ import annotations

import torch

SCALE_BYTES = 2  # one fp16 per row, after the values
QMAX = 127  # symmetric: -127..127 (-128 never written)
_FP16_MAX = 65504.0


def is_int8(cache: torch.Tensor) -> bool:
    """Whether a KV cache (or a gathered part of one) holds packed int8 rows."""
    return cache.dtype == torch.int8


def row_bytes(head_dim: int) -> int:
    """Bytes of one packed (token, head) row."""
    return head_dim + SCALE_BYTES


def quantize(x: torch.Tensor) -> torch.Tensor:
    """``x [..., D]`` (fp32 or bf16; D even) -> packed int8 rows ``[..., D + 2]``."""
    xf = x.float()
    absmax = xf.abs().amax(-1, keepdim=True)  # [..., 1]
    scale = (absmax / QMAX).clamp(max=_FP16_MAX).to(torch.float16)
    # divide by the scale as stored, so that dequantizing undoes exactly this rounding
    stored = scale.float()
    inv = torch.where(stored > 0, 1.0 / stored, torch.zeros_like(stored))
    q = (xf * inv).round_().clamp_(-QMAX, QMAX).to(torch.int8)
    return torch.cat([q, scale.view(torch.int8)], dim=-1)


def dequantize(rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Packed int8 rows ``[..., D + 2]`` -> ``[..., D]`` in ``dtype``."""
    d = rows.shape[-1] - SCALE_BYTES
    rows = rows.contiguous()
    scale = rows[..., d:].view(torch.float16).float()  # [..., 1]
    return (rows[..., :d].float() * scale).to(dtype)


def fake_quantize(x: torch.Tensor) -> torch.Tensor:
    """``x`` as an int8 pool gives it back: what a later reader of the same page sees."""
    return dequantize(quantize(x), x.dtype)
