"""bf16 matmul kernels: each candidate against the fp32 product, and a measured choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minisgl_core.kernels import BUCKETS, Linear, bf16_fast
from minisgl_core.kernels.matmul.amx import AmxHF
from minisgl_core.kernels.matmul.choice import candidates, choose
from minisgl_core.kernels.matmul.weight_only import amx_matmul

CPU, BF16 = torch.device("cpu"), torch.bfloat16


def _bf16_kernels() -> list:
    return candidates("qkv", CPU, BF16, None)


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 33])
@pytest.mark.parametrize("shape", [(96, 64), (37, 50), (3072, 576)])
def test_every_bf16_kernel_matches_the_fp32_product(rows: int, shape: tuple[int, int]) -> None:
    gen = torch.Generator().manual_seed(rows * 1000 + shape[0])
    out, inp = shape
    w = (torch.randn(out, inp, generator=gen) / inp ** 0.5).to(BF16)  # [out, in]
    b = torch.randn(out, generator=gen).to(BF16)
    x = torch.randn(rows, inp, generator=gen).to(BF16)  # [T, in]
    res = torch.randn(rows, out, generator=gen).to(BF16)  # [T, out]
    ref = x.float() @ w.float().t() + b.float()  # what bf16 inputs give in exact arithmetic
    for kernel in _bf16_kernels():
        lin = Linear(w, b, kernel)
        y = lin(x)
        assert y.shape == (rows, out) and y.dtype == BF16, kernel.name
        # bf16 output rounding: 2^-8 relative, plus accumulation order
        torch.testing.assert_close(y.float(), ref, atol=0.05, rtol=0.02, msg=kernel.name)
        torch.testing.assert_close(lin(x, res).float(), ref + res.float(), atol=0.08,
                                   rtol=0.02, msg=kernel.name)


@pytest.mark.skipif(not AmxHF().available(CPU, BF16), reason="no AMX here (or no native library)")
def test_amx_on_the_hf_weight_is_the_exact_product_before_rounding() -> None:
    gen = torch.Generator().manual_seed(5)
    # odd widths (a partial last group and block: copied, not loaded as tiles) and real ones
    for out, inp in [(37, 50), (5, 33), (960, 576), (576, 1536), (49152 // 16, 576), (25, 40)]:
        w = torch.randn(out, inp, generator=gen).to(BF16)
        for rows in (1, 2, 3, 8, 17, 24, 32, 33, 64, 65, 130):
            x = torch.randn(rows, inp, generator=gen).to(BF16)
            y = amx_matmul(x, w)
            ref = x.double() @ w.double().t()  # products of bf16 are exact in fp32
            assert y is not None and y.shape == (rows, out)
            assert float((y - ref).abs().max() / ref.abs().max()) < 1e-5, (out, inp, rows)


def test_onednn_is_a_bf16_candidate_exactly_where_the_host_computes_bf16() -> None:
    names = {k.name for k in _bf16_kernels()}
    assert {"dense", "dense-hf"} <= names
    # on an AVX2-only host bf16 in oneDNN is emulated (hundreds of times slower): never offered
    assert ("onednn" in names) == bf16_fast()


def test_a_bf16_choice_is_measured_then_read_back_the_same(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MINISGL_LINEAR", raising=False)
    shapes = {"qkv": (96, 64), "down": (64, 128)}
    first = choose(shapes, CPU, BF16, cache=tmp_path, budget_s=60.0, load=lambda: 0.0)
    assert first.source.startswith("measured")
    again = choose(shapes, CPU, BF16, cache=tmp_path, load=lambda: 0.0,
                   timer=lambda *_: pytest.fail("a cached choice was measured again"))
    assert again.names() == first.names() and again.source.startswith("cached")
    assert all(len(ks) == len(BUCKETS) for ks in first.kernels.values())
    fp32 = choose(shapes, CPU, torch.float32, cache=tmp_path, budget_s=60.0, load=lambda: 0.0)
    assert fp32.source.startswith("measured")  # the dtype is in the cache key
