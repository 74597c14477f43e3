"""Paged attention (decode gather + prefill in groups, padded, with cached prefixes; sliding
windows) vs a float64 reference."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from minisgl_core.engine import attention
from minisgl_core.engine.attention import Workspace, build_metadata, paged_attention, windowed
from minisgl_core.engine.kv_cache import KVPool, PageAllocator
from minisgl_core.kernels import cpu_features, prefill_attention

HQ, HKV, D, P = 6, 2, 16, 4


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int,
               window: int | None = None) -> torch.Tensor:
    """q [n, Hq, D] at positions start.., k/v [start + n, Hkv, D] -> [n, Hq * D] in float64
    (each query seeing only the last ``window`` keys up to its own, when given)."""
    q, k, v = q.double(), k.double(), v.double()
    k = k.repeat_interleave(HQ // HKV, dim=1)
    v = v.repeat_interleave(HQ // HKV, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    qpos = torch.arange(q.shape[0]).unsqueeze(1) + start
    keys = torch.arange(k.shape[0]).unsqueeze(0)
    hidden = (keys > qpos) | (keys <= qpos - window if window else False)
    scores = scores.masked_fill(hidden, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(q.shape[0], -1)


CASES = [
    {"decode": [7, 1, 30], "prefill": []},          # decode only, ragged lengths
    {"decode": [9], "prefill": []},                 # one sequence, no mask
    {"decode": [], "prefill": [(0, 13)]},           # one fresh prompt (is_causal path)
    {"decode": [], "prefill": [(8, 5)]},            # a chunk on top of a cached prefix
    {"decode": [], "prefill": [(0, 6), (11, 3), (4, 9)]},  # padded prefill batch
    {"decode": [5, 17], "prefill": [(0, 7), (20, 4)]},     # mixed step
    # with SOLO_ROWS 6 below: alone (fresh, then on a prefix), short ones batched between them
    {"decode": [3], "prefill": [(0, 9), (5, 2), (0, 3), (12, 6), (2, 1), (0, 7)]},
]


def _attend(case: dict[str, list], window: int | None, dtype: torch.dtype, d: int,
            ) -> tuple[torch.Tensor, torch.Tensor, attention.AttentionMetadata]:
    """The step's attention by paged_attention, the float64 reference of the same (rounded)
    inputs, and the step's metadata."""
    g = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    kv = KVPool(1, 64, P, HKV, d, dtype, "cpu")
    alloc = PageAllocator(64)
    alloc.alloc(rng.randrange(1, 10))  # so that page ids are not simply 1, 2, 3 ...
    seqs = [(length - 1, 1) for length in case["decode"]] + list(case["prefill"])
    pages, qs, ks, vs = [], [], [], []
    for start, n in seqs:
        total = start + n
        pg = alloc.alloc(-(-total // P))
        rng.shuffle(pg)
        pages.append(pg)
        k = torch.randn(total, HKV, d, generator=g).to(dtype)
        v = torch.randn(total, HKV, d, generator=g).to(dtype)
        slots = torch.tensor([pg[p // P] * P + p % P for p in range(start)], dtype=torch.int64)
        kv.store(0, slots, k[:start], v[:start])  # the cached prefix
        qs.append(torch.randn(n, HQ, d, generator=g).to(dtype))
        ks.append(k)
        vs.append(v)
    nd = len(case["decode"])
    meta = build_metadata([(pages[i], seqs[i][0] + 1) for i in range(nd)],
                          [(pages[i], *seqs[i]) for i in range(nd, len(seqs))], P, "cpu")
    q = torch.cat(qs)
    k_new = torch.cat([k[s:] for k, (s, _) in zip(ks, seqs, strict=True)])
    v_new = torch.cat([v[s:] for v, (s, _) in zip(vs, seqs, strict=True)])
    kv.store(0, meta.out_slots, k_new, v_new)
    if window is not None:
        meta = windowed(meta, window)
    out = paged_attention(q, k_new, v_new, kv.k_layers[0], kv.v_layers[0], meta,
                          Workspace(HKV, d, dtype, "cpu"))
    want = torch.cat([_reference(qs[i], ks[i], vs[i], seqs[i][0], window)
                      for i in range(len(seqs))])
    return out, want, meta


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("solo_rows", [attention.SOLO_ROWS, 6])
@pytest.mark.parametrize("window", [None, 5])
def test_paged_attention_matches_float64_reference(case: dict[str, list], solo_rows: int,
                                                   window: int | None, monkeypatch) -> None:
    monkeypatch.setattr(attention, "SOLO_ROWS", solo_rows)
    out, want, meta = _attend(case, window, torch.float32, D)
    if len(case["prefill"]) == 6:  # 9 | 2 3 | 6 | 1 | 7 under SOLO_ROWS 6, else one group
        assert meta.prefill is not None and len(meta.prefill) == (5 if solo_rows == 6 else 1)
    assert out.shape == want.shape
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("case", [c for c in CASES if c["prefill"]])
@pytest.mark.parametrize("window", [None, 5])
def test_bf16_prefill_by_the_native_kernel_matches_float64_reference(
        case: dict[str, list], window: int | None, monkeypatch) -> None:
    """bf16 at 64 dims a head, SOLO_ROWS 6: every single-sequence group without a window goes
    to the native prefill kernel where this CPU has AVX512-BF16 (whatever it measured against
    SDPA), the rest to SDPA; both within bf16's rounding of the reference."""
    monkeypatch.setattr(attention, "SOLO_ROWS", 6)
    monkeypatch.setattr(prefill_attention, "preferred", lambda *a: True)
    ran = []
    real_run = prefill_attention.run
    monkeypatch.setattr(prefill_attention, "run",
                        lambda *a: ran.append(real_run(*a)) or ran[-1])
    out, want, meta = _attend(case, window, torch.bfloat16, 64)
    torch.testing.assert_close(out.double(), want, atol=2e-2, rtol=2e-2)
    causal = [g for g in meta.prefill or () if g.causal]
    assert len(ran) == len(causal)
    if window is not None:
        assert not any(g.causal and g.kv_len > window for g in meta.prefill or ())
    if cpu_features.has("avx512_bf16"):  # the kernel can run here: it must have
        assert all(o is not None for o in ran)


def test_allocator_refuses_double_free_and_overdraw() -> None:
    alloc = PageAllocator(4)
    pages = alloc.alloc(3)
    assert sorted(pages) == [1, 2, 3] and alloc.num_free == 1
    with pytest.raises(RuntimeError):
        alloc.alloc(2)
    assert alloc.num_free == 1
    alloc.free(pages[:1])
    with pytest.raises(RuntimeError, match="freed twice"):
        alloc.free(pages[:2])
    assert alloc.num_free == 2  # the failed free changed nothing
    with pytest.raises(RuntimeError):
        alloc.free([0])  # the scratch page is never handed out


def test_a_steps_mask_is_made_additive_once_for_all_its_layers() -> None:
    ws = Workspace(2, 8, torch.bfloat16, "cpu")
    mask = torch.tensor([[True, False], [True, True]])[None, None]
    bias = ws.additive(mask, torch.bfloat16)
    assert bias is not None and bias.dtype == torch.bfloat16
    assert bias.tolist() == [[[[0.0, float("-inf")], [0.0, 0.0]]]]
    assert ws.additive(mask, torch.bfloat16) is bias  # the next layer's call: no new tensor
    assert ws.additive(mask.clone(), torch.bfloat16) is not bias  # the next step's mask
    assert ws.additive(mask, torch.float32).dtype == torch.float32
    assert ws.additive(None, torch.float32) is None
    # what SDPA makes of the bool mask itself: the same outputs, bit for bit
    q, k, v = (torch.randn(1, 2, 2, 8).bfloat16() for _ in range(3))
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               rtol=0, atol=0)


def test_an_engine_measures_the_prefill_kernel_when_it_loads(make_engine, monkeypatch) -> None:
    """The native kernel against SDPA for the model's heads is measured before any request:
    the first prompt's step does not pay for it."""
    asked = []
    monkeypatch.setattr(prefill_attention, "preferred", lambda *a: asked.append(a) or False)
    engine = make_engine("qwen3", dtype="bfloat16")
    m = engine.model
    assert asked == [(m.num_q_heads, m.num_kv_heads, m.cfg.head_dim, torch.bfloat16)]
    assert m.num_q_heads == m.cfg.num_heads and m.num_q_heads > m.num_kv_heads  # grouped
