"""The native prefill attention (csrc/avx512/prefill_attention.c) against a float64 reference:
queries at the end of their keys, causal, grouped heads, the head sizes it takes; and where it
declines. Skipped only where the CPU (or its mask) has no AVX512-BF16."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels import cpu_features, prefill_attention

HERE = cpu_features.has("avx512_bf16") and cpu_features.has("avx512")
needs_kernel = pytest.mark.skipif(not HERE, reason="no AVX512-BF16 here")


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    n, hq, d = q.shape
    s, hkv, _ = k.shape
    g = hq // hkv
    kd, vd = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    scores = torch.einsum("nhd,shd->hns", q.double(), kd) * scale
    hidden = torch.arange(s).view(1, -1) > torch.arange(s - n, s).view(-1, 1)
    weights = scores.masked_fill(hidden, float("-inf")).softmax(-1)
    return torch.einsum("hns,shd->nhd", weights, vd).reshape(n, hq * d)


def _inputs(n: int, s: int, hq: int, hkv: int, d: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(n * 1000 + s)
    return tuple(torch.randn(rows, h, d, generator=gen).bfloat16()
                 for rows, h in ((n, hq), (s, hkv), (s, hkv)))


@needs_kernel
@pytest.mark.parametrize("n", [1, 2, 3, 8, 17, 33, 64, 65])
@pytest.mark.parametrize("cached", [0, 5, 100])
def test_rows_on_top_of_cached_keys_match_float64(n: int, cached: int) -> None:
    q, k, v = _inputs(n, n + cached, 9, 3, 64)
    out = prefill_attention.run(q, k, v, 0.125)
    assert out is not None and out.shape == (n, 9 * 64) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _reference(q, k, v, 0.125), atol=1e-2, rtol=1e-2)


@needs_kernel
@pytest.mark.parametrize(("hq", "hkv", "d"), [(4, 4, 64), (8, 1, 128), (4, 2, 256)])
def test_other_heads_and_sizes_match_float64(hq: int, hkv: int, d: int) -> None:
    q, k, v = _inputs(37, 70, hq, hkv, d)
    out = prefill_attention.run(q, k, v, d ** -0.5)
    assert out is not None
    torch.testing.assert_close(out.double(), _reference(q, k, v, d ** -0.5), atol=1e-2,
                               rtol=1e-2)


@needs_kernel
def test_strided_rows_are_read_in_place() -> None:
    """k and v as the decoder has them: slices of one fused row of q | k | v."""
    q, k, v = _inputs(20, 20, 9, 3, 64)
    fused = torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], dim=1)
    ks, vs = fused[:, 576:768].view(20, 3, 64), fused[:, 768:].view(20, 3, 64)
    out = prefill_attention.run(q, ks, vs, 0.125)
    assert out is not None
    torch.testing.assert_close(out, prefill_attention.run(q, k, v, 0.125), rtol=0, atol=0)


def test_what_it_declines_goes_back_to_the_caller() -> None:
    q, k, v = _inputs(4, 4, 4, 2, 64)
    assert prefill_attention.run(q.float(), k.float(), v.float(), 0.125) is None
    q32, k32, v32 = _inputs(4, 4, 4, 2, 32)
    assert prefill_attention.run(q32, k32, v32, 0.2) is None  # 32 dims: not a multiple of 64
    assert prefill_attention.run(q[:, ::2], k[:, :1], v[:, :1], 0.125) is None  # strided heads
    assert not prefill_attention.preferred(4, 2, 64, torch.float32)


def test_switched_off_by_the_attention_variable(monkeypatch) -> None:
    monkeypatch.setenv("MINISGL_ATTENTION", "sdpa")
    assert not prefill_attention.preferred(9, 3, 64, torch.bfloat16)
