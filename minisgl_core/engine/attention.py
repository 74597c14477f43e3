"""Attention over the paged KV cache, with per-step metadata built once and shared by all layers.

A step's tokens are packed as ``[T, ...]``: first one token per decoding request, then the new
tokens of each prefilling request. Decode rows attend through one padded gather of their cached
keys. Prefill rows attend in groups of consecutive requests (one SDPA call each): a request of
SOLO_ROWS new tokens or more alone, the shorter ones between them together, padded to
``[B, Lq]`` with a bottom-right-aligned causal mask (query i of a request with ``start`` cached
tokens sits at position start + i and sees keys 0..start + i). One padded call over a long
request and a short one computes the short one's rows against the long one's keys: a chunk with
the last 431 tokens of one prompt and the first 81 of the next took 6.4-7.7 ms an attention layer
padded, 3.2-4.2 ms as two calls (bf16, 9 heads of 64, 2 threads, the Xeon with AMX).
Under ``--deterministic`` (``RowKeys``) every row, decode or prefill, attends by the
batch-invariant kernel instead, reading its own keys in position order (kernels/invariant.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from minisgl_core.kernels import (
    Workspace,
    gathered,
    invariant,
    kv_int8,
    paged_decode_attention,
    prefill_attention,
)

SOLO_ROWS = 64  # a prefilling request with this many new tokens attends in a call of its own


@dataclass(frozen=True)
class GroupMeta:
    """One SDPA call: B sequences padded to ``q_len`` queries and ``kv_len`` keys."""

    batch: int
    q_len: int
    kv_len: int
    kv_index: torch.Tensor  # [B * kv_len] slots to gather; padding points at scratch slot 0
    mask: torch.Tensor | None  # [B, 1, q_len, kv_len] bool (True = attend); None = all visible
    q_pad: torch.Tensor | None  # [B * q_len] packed row of each padded query (None: no padding)
    q_unpad: torch.Tensor | None  # [T_group] padded position of each packed row
    fresh_causal: bool  # one sequence, nothing cached: attend over the new k/v (causal, or
    # ``mask`` when set: a sliding window's)
    causal: bool = False  # one sequence whose queries are its last q_len keys, each seeing the
    # keys up to its own (no window): the native prefill kernel's case


@dataclass(frozen=True)
class RowKeys:
    """Each row's keys for the batch-invariant attention: row t sees keys 0..positions[t] of
    sequence ``row_seq[t]`` (the last ``window`` of them when window > 0)."""

    seq_slots: torch.Tensor  # [S, L] slot of each key of each sequence (0 past its end)
    row_seq: torch.Tensor  # [T] int64
    window: int = 0


@dataclass(frozen=True)
class AttentionMetadata:
    """Everything attention needs for one step (shared by every layer)."""

    positions: torch.Tensor  # [T] absolute position of each token
    out_slots: torch.Tensor  # [T] KV slot each token's key/value is written to
    num_decode: int  # the first num_decode rows are decode tokens
    decode: GroupMeta | None
    prefill: tuple[GroupMeta, ...] | None  # consecutive groups of the prefill rows, in order
    rows: RowKeys | None = None  # set under --deterministic: every row attends by its keys
    # the same step seen by sliding-window layers, by window (built once, by windowed())
    windows: dict[int, AttentionMetadata] = field(default_factory=dict, compare=False,
                                                 repr=False)


def _slots(pages: Sequence[int], start: int, stop: int, page_size: int) -> list[int]:
    return [pages[p // page_size] * page_size + p % page_size for p in range(start, stop)]


_PAGE_OFFSETS: dict[int, torch.Tensor] = {}  # page size -> arange(page size) [P], made once


def _slot_matrix(pages: Sequence[Sequence[int]], lengths: Sequence[int],
                 page_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Slots ``[B, Lmax]`` of positions 0..len-1 of each sequence (0 past the end), and which
    are valid ``[B, Lmax]``: None when every sequence is Lmax long (nothing past an end; a step
    of one request builds no mask)."""
    lmax = max(lengths)
    npages = -(-lmax // page_size)
    table = torch.tensor([list(p[:npages]) + [0] * (npages - min(len(p), npages)) for p in pages],
                         dtype=torch.int64)  # [B, npages]
    offsets = _PAGE_OFFSETS.get(page_size)
    if offsets is None:
        offsets = _PAGE_OFFSETS.setdefault(page_size, torch.arange(page_size))
    slots = (table.unsqueeze(-1) * page_size + offsets).view(len(pages), -1)[:, :lmax]
    if min(lengths) == lmax:
        return slots, None
    valid = torch.arange(lmax) < torch.tensor(lengths).unsqueeze(1)  # [B, Lmax]
    return torch.where(valid, slots, 0), valid


def build_metadata(decode: Sequence[tuple[Sequence[int], int]],
                   prefill: Sequence[tuple[Sequence[int], int, int]],
                   page_size: int, device: torch.device | str,
                   invariant_rows: bool = False) -> AttentionMetadata:
    """``decode``: (pages, kv_len incl. the new token); ``prefill``: (pages, start, num_new);
    ``invariant_rows``: also each row's keys for the batch-invariant attention."""
    positions: list[int] = []
    out_slots: list[int] = []
    for pages, kv_len in decode:
        positions.append(kv_len - 1)
        out_slots.extend(_slots(pages, kv_len - 1, kv_len, page_size))
    for pages, start, n in prefill:
        positions.extend(range(start, start + n))
        out_slots.extend(_slots(pages, start, start + n, page_size))

    def dev(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, non_blocking=True)

    dmeta = None
    if decode:
        lens = [kv_len for _, kv_len in decode]
        slots, valid = _slot_matrix([p for p, _ in decode], lens, page_size)
        mask = None if valid is None else dev(valid[:, None, None, :])
        dmeta = GroupMeta(len(decode), 1, max(lens), dev(slots.flatten()), mask, None, None, False)
    pmeta = None
    if prefill:
        pmeta = tuple(_prefill_meta(group, page_size, device) for group in _groups(prefill))
    rows = None
    if invariant_rows:
        seqs = [p for p, _ in decode] + [p for p, _, _ in prefill]
        lens = [n for _, n in decode] + [s + n for _, s, n in prefill]
        slots, _ = _slot_matrix(seqs, lens, page_size)
        row_seq = list(range(len(decode))) + [len(decode) + i for i, (_, _, n) in
                                              enumerate(prefill) for _ in range(n)]
        rows = RowKeys(dev(slots), dev(torch.tensor(row_seq)))
    return AttentionMetadata(dev(torch.tensor(positions)), dev(torch.tensor(out_slots)),
                             len(decode), dmeta, pmeta, rows)


def _groups(prefill: Sequence[tuple[Sequence[int], int, int]],
            ) -> list[Sequence[tuple[Sequence[int], int, int]]]:
    """The prefilling requests in SDPA calls: each of SOLO_ROWS new tokens or more alone, the
    shorter ones between them together (in order: each group's rows are consecutive)."""
    groups: list[list[tuple[Sequence[int], int, int]]] = []
    short = False  # whether the last group holds short requests (more may join it)
    for seq in prefill:
        if seq[2] >= SOLO_ROWS:
            groups.append([seq])
            short = False
        elif short:
            groups[-1].append(seq)
        else:
            groups.append([seq])
            short = True
    return groups


def _prefill_meta(prefill: Sequence[tuple[Sequence[int], int, int]], page_size: int,
                  device: torch.device | str) -> GroupMeta:
    def dev(t: torch.Tensor) -> torch.Tensor:
        return t.to(device, non_blocking=True)

    starts = [s for _, s, _ in prefill]
    news = [n for _, _, n in prefill]
    lens = [s + n for s, n in zip(starts, news, strict=True)]
    b, lq, lk = len(prefill), max(news), max(lens)
    fresh = b == 1 and starts[0] == 0
    if fresh:  # attends over its own new k/v: nothing to gather
        return GroupMeta(1, lq, lk, torch.empty(0, dtype=torch.int64), None, None, None, True,
                         True)
    slots, _ = _slot_matrix([p for p, _, _ in prefill], lens, page_size)
    q_pad = q_unpad = None
    if b > 1:
        pad: list[int] = []
        unpad: list[int] = []
        offset = 0
        for i, n in enumerate(news):
            pad.extend(range(offset, offset + n))
            pad.extend([0] * (lq - n))
            unpad.extend(range(i * lq, i * lq + n))
            offset += n
        q_pad, q_unpad = dev(torch.tensor(pad)), dev(torch.tensor(unpad))
    qpos = torch.tensor(starts).view(b, 1, 1) + torch.arange(lq).view(1, lq, 1)
    mask = dev((torch.arange(lk).view(1, 1, lk) <= qpos).unsqueeze(1))
    return GroupMeta(b, lq, lk, dev(slots.flatten()), mask, q_pad, q_unpad, False, b == 1)


def windowed(meta: AttentionMetadata, window: int) -> AttentionMetadata:
    """The step as a sliding-window layer sees it: each query at position p attends to the keys
    at positions p - window + 1 .. p (as transformers' sliding-window mask), and a decode row
    gathers only those, not the whole context. Built once per step and window."""
    if window not in meta.windows:
        nd = meta.num_decode
        decode = None if meta.decode is None else _windowed_decode(
            meta.decode, meta.positions[:nd], window)
        prefill = None
        if meta.prefill is not None:
            offsets = _offsets(meta.prefill, nd)
            prefill = tuple(_windowed_prefill(g, meta.positions[a:b], window)
                            for g, (a, b) in zip(meta.prefill, offsets, strict=True))
        rows = None if meta.rows is None else replace(meta.rows, window=window)
        meta.windows[window] = AttentionMetadata(meta.positions, meta.out_slots, nd, decode,
                                                 prefill, rows)
    return meta.windows[window]


def _offsets(groups: Sequence[GroupMeta], start: int) -> list[tuple[int, int]]:
    """The row range ``[a, b)`` of each prefill group in the step's rows (from ``start``)."""
    out = []
    for g in groups:
        rows = g.q_len if g.q_unpad is None else int(g.q_unpad.shape[0])
        out.append((start, start + rows))
        start += rows
    return out


def _windowed_decode(g: GroupMeta, positions: torch.Tensor, window: int) -> GroupMeta:
    if g.kv_len <= window:  # every key is inside the window
        return g
    dev = positions.device
    keys = positions.unsqueeze(1) - window + 1 + torch.arange(window, device=dev)  # [B, W]
    slots = g.kv_index.view(g.batch, g.kv_len).gather(1, keys.clamp(min=0))
    return GroupMeta(g.batch, 1, window, slots.flatten(), (keys >= 0)[:, None, None, :], None,
                     None, False)


def _windowed_prefill(g: GroupMeta, positions: torch.Tensor, window: int) -> GroupMeta:
    if g.kv_len <= window:  # no query is more than a window past any of its keys
        return g
    qpos = positions.unsqueeze(0) if g.q_pad is None else positions.index_select(
        0, g.q_pad).view(g.batch, g.q_len)  # [B, Lq] (padding rows: any position)
    keys = torch.arange(g.kv_len, device=positions.device)
    near = keys.view(1, 1, -1) > qpos.unsqueeze(-1) - window  # [B, Lq, Lk]
    seen = keys.view(1, 1, -1) <= qpos.unsqueeze(-1)
    mask = (near & seen).unsqueeze(1)  # [B, 1, Lq, Lk]
    if g.mask is not None:
        mask = mask & g.mask
    return GroupMeta(g.batch, g.q_len, g.kv_len, g.kv_index, mask, g.q_pad, g.q_unpad,
                     g.fresh_causal, False)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata,
                    ws: Workspace, scale: float | None = None) -> torch.Tensor:
    """``q [T, Hq, D]``, new ``k, v [T, Hkv, D]`` (already stored) -> ``[T, Hq * D]``;
    ``scale`` multiplies q·k (None: 1 / sqrt(D)). ``windowed(meta, w)`` for a sliding layer.
    The caches may hold packed int8 rows (kernels/kv_int8.py): decode reads them in place, a
    prefill dequantizes only the slots its requests attend to."""
    d = q.shape[-1]
    if meta.rows is not None:
        r = meta.rows
        return invariant.attention(q, k_cache, v_cache, r.seq_slots, r.row_seq, meta.positions,
                                   d ** -0.5 if scale is None else scale, r.window)
    q = q.contiguous()  # a strided q (a slice of the fused q|k rows) sends SDPA down a slow path
    outs: list[torch.Tensor] = []
    nd = meta.num_decode
    if meta.decode is not None:
        g, sc = meta.decode, d ** -0.5 if scale is None else scale
        outs.append(paged_decode_attention(q[:nd], k_cache, v_cache, g.kv_index, g.mask,
                                                   sc, ws))
    if meta.prefill is not None:
        for g, (a, b) in zip(meta.prefill, _offsets(meta.prefill, nd), strict=True):
            outs.append(_prefill_attention(q[a:b], k[a:b], v[a:b], k_cache, v_cache, g, ws,
                                           scale))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def choose_prefill_kernel(q_heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
                          device: torch.device) -> None:
    """Measure now whether a prefill of these heads takes the native kernel or SDPA (once a
    process, about 30 ms on a 2-core Zen 4), so that the first prompt's step does not."""
    if device.type == "cpu":
        prefill_attention.preferred(q_heads, kv_heads, head_dim, dtype)


def _prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, g: GroupMeta,
                       ws: Workspace, scale: float | None) -> torch.Tensor:
    tp, hq, d = q.shape
    native = g.causal and prefill_attention.preferred(hq, k.shape[1], d, q.dtype)
    native_scale = d ** -0.5 if scale is None else scale
    if g.fresh_causal:  # [1, H, n, D] straight from the new rows
        if kv_int8.is_int8(k_cache):  # as stored: the same keys a later chunk or a cache hit sees
            k, v = kv_int8.fake_quantize(k), kv_int8.fake_quantize(v)
        o = prefill_attention.run(q, k, v, native_scale) if native else None
        if o is not None:
            return o
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                           v.transpose(0, 1)[None],
                                           attn_mask=ws.additive(g.mask, q.dtype),
                                           is_causal=g.mask is None, enable_gqa=True,
                                           scale=scale)
        return o[0].transpose(0, 1).reshape(tp, hq * d)
    kb, vb = ws.buffers(g.batch * g.kv_len)
    keys = gathered(k_cache, g.kv_index, kb, g.batch, g.kv_len)
    vals = gathered(v_cache, g.kv_index, vb, g.batch, g.kv_len)
    if native:  # one sequence: the buffers hold its keys as rows [kv_len, Hkv, D]
        o = prefill_attention.run(q, kb, vb, native_scale)
        if o is not None:
            return o
    if g.q_pad is None:
        qp = q.transpose(0, 1)[None]  # [1, Hq, n, D]
    else:
        qp = q.reshape(tp, hq * d).index_select(0, g.q_pad)
        qp = qp.view(g.batch, g.q_len, hq, d).transpose(1, 2)  # [B, Hq, Lq, D]
    o = F.scaled_dot_product_attention(qp, keys, vals, attn_mask=ws.additive(g.mask, q.dtype),
                                       enable_gqa=True, scale=scale)
    o = o.transpose(1, 2).reshape(g.batch * g.q_len, hq * d)
    return o if g.q_unpad is None else o.index_select(0, g.q_unpad)
