"""The batch-invariant ops of ``--deterministic``: attention over the pages for every row, and
the code between the matmuls as opaque ops inside compiled graphs.

``attention`` runs csrc/batch_invariant/attention.c: each query row (decode, prefill or
speculative verify) reads its own keys, 0..position, in position order, so its result does not
depend on the batch, the prefill chunking or the padding. ``rms_norm``, ``rope`` and ``swiglu``
are what the decoders compute between the matmuls; eagerly they are the plain torch code (whose
per-row results were checked not to depend on the row count: tests/kernels/
test_batch_invariant.py), and in a compiled graph the same code behind custom ops, so inductor
neither reorders their sums nor skips a bf16 rounding: a compiled step gives the eager bits.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from minisgl_core.kernels.native import library as native

_BF16 = {torch.float32: 0, torch.bfloat16: 1}


def attention_eager(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    seq_slots: torch.Tensor, row_seq: torch.Tensor, positions: torch.Tensor,
                    scale: float, window: int) -> torch.Tensor:
    """``q [T, Hq, D]``, caches ``[slots, Hkv, D]``, ``seq_slots [S, L]`` (the slot of each key
    of each sequence), ``row_seq [T]`` (each row's sequence), ``positions [T]`` (row t sees
    keys 0..positions[t], the last ``window`` of them when window > 0) -> ``[T, Hq * D]``."""
    lib = native.library()
    if lib is None:
        raise RuntimeError(f"--deterministic needs the native kernels: {native.failure()}")
    t, hq, d = q.shape
    q = q.contiguous()
    slots = seq_slots.contiguous()
    rows, pos = row_seq.contiguous(), positions.contiguous()
    out = torch.empty((t, hq * d), dtype=q.dtype, device=q.device)
    done = lib.bi_attention(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                            slots.data_ptr(), slots.shape[1], rows.data_ptr(), pos.data_ptr(),
                            t, hq, k_cache.shape[1], d, ctypes.c_float(scale), window,
                            _BF16[q.dtype], out.data_ptr(), native.best_isa())
    if done != 0:
        raise RuntimeError(f"bi_attention does not take {hq} query heads over "
                           f"{k_cache.shape[1]} KV heads of dimension {d}")
    return out


@torch.library.custom_op("minisgl::invariant_attention", mutates_args=())
def _attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  seq_slots: torch.Tensor, row_seq: torch.Tensor, positions: torch.Tensor,
                  scale: float, window: int) -> torch.Tensor:
    return attention_eager(q, k_cache, v_cache, seq_slots, row_seq, positions, scale, window)


@_attention_op.register_fake
def _attention_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    seq_slots: torch.Tensor, row_seq: torch.Tensor, positions: torch.Tensor,
                    scale: float, window: int) -> torch.Tensor:
    return q.new_empty((q.shape[0], q.shape[1] * q.shape[2]))


def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              seq_slots: torch.Tensor, row_seq: torch.Tensor, positions: torch.Tensor,
              scale: float, window: int = 0) -> torch.Tensor:
    """``attention_eager``, behind an opaque op in a compiled graph."""
    if torch.compiler.is_compiling():
        return torch.ops.minisgl.invariant_attention(q, k_cache, v_cache, seq_slots, row_seq,
                                                     positions, scale, window)
    return attention_eager(q, k_cache, v_cache, seq_slots, row_seq, positions, scale, window)


def _rms_norm_eager(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return F.rms_norm(x.contiguous(), (x.shape[-1],), weight, eps)


@torch.library.custom_op("minisgl::invariant_rms_norm", mutates_args=())
def _rms_norm_op(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return _rms_norm_eager(x, weight, eps)


@_rms_norm_op.register_fake
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return x.new_empty(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension of ``x`` (times ``weight`` when given)."""
    if torch.compiler.is_compiling():
        return torch.ops.minisgl.invariant_rms_norm(x, weight, eps)
    return _rms_norm_eager(x, weight, eps)


def _rope_eager(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                head_weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    # qk [T, H, D]; cos, sin [T, 1, D] (sin's first half negated: see the decoder);
    # head_weight [H, D]: Qwen3's per-head RMSNorm of q and k first (None: none)
    qk = qk.contiguous()
    if head_weight is not None:
        qk = F.rms_norm(qk, (qk.shape[-1],), eps=eps) * head_weight
    half = qk.shape[-1] // 2
    return qk * cos + torch.cat((qk[..., half:], qk[..., :half]), -1) * sin


@torch.library.custom_op("minisgl::invariant_rope", mutates_args=())
def _rope_op(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             head_weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return _rope_eager(qk, cos, sin, head_weight, eps)


@_rope_op.register_fake
def _rope_fake(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               head_weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return qk.new_empty(qk.shape)


def rope(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         head_weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """Rotary embedding of ``qk [T, H, D]`` (after the per-head norm when ``head_weight``)."""
    if torch.compiler.is_compiling():
        return torch.ops.minisgl.invariant_rope(qk, cos, sin, head_weight, eps)
    return _rope_eager(qk, cos, sin, head_weight, eps)


def _swiglu_eager(gate_up: torch.Tensor) -> torch.Tensor:
    inter = gate_up.shape[1] // 2  # gate_up [T, 2 I] -> [T, I]
    return F.silu(gate_up[:, :inter].contiguous()).mul_(gate_up[:, inter:])


@torch.library.custom_op("minisgl::invariant_swiglu", mutates_args=())
def _swiglu_op(gate_up: torch.Tensor) -> torch.Tensor:
    return _swiglu_eager(gate_up)


@_swiglu_op.register_fake
def _swiglu_fake(gate_up: torch.Tensor) -> torch.Tensor:
    return gate_up.new_empty((gate_up.shape[0], gate_up.shape[1] // 2))


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``gate_up [T, 2 I]`` -> ``[T, I]``."""
    if torch.compiler.is_compiling():
        return torch.ops.minisgl.invariant_swiglu(gate_up)
    return _swiglu_eager(gate_up)
