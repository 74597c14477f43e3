"""The decoder's elementwise steps in one native pass each (kernels/elementwise.py,
csrc/elementwise.c): RMSNorm, the rotary embedding and SwiGLU against torch's ops in fp32,
with fp32 and bf16 tensors (rounded once), odd widths and strided rows; and where they decline."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minisgl_core.engine.models.decoder import rms_norm, rotary, swiglu
from minisgl_core.kernels import elementwise
from minisgl_core.kernels.native import library as native

pytestmark = pytest.mark.skipif(native.library() is None, reason="no native library")
ROWS = (1, 3, 17, 130)  # one thread and several (the kernels go parallel from 16K elements)


def _close(y: torch.Tensor, ref: torch.Tensor) -> None:
    """``y`` is ``ref`` (fp32 math) rounded once to y's dtype, up to fp32 summation order."""
    assert y.dtype in (torch.float32, torch.bfloat16) and y.shape == ref.shape
    if y.dtype == torch.float32:
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    else:  # half a bf16 step of the value, and a hair for the fp32 sums' order
        err = (y.float() - ref).abs()
        assert bool((err <= ref.abs() * 2.0**-8 * 1.01 + 1e-6).all()), float(err.max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_one_rounding_of_the_fp32_norm(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    for rows in ROWS:
        for width in (576, 33, 2048):
            x = (torch.randn(rows, width + 7, generator=gen) * 3).to(dtype)[:, 3:width + 3]
            w = torch.randn(width, generator=gen)
            y = elementwise.rms_norm(x, w, 1e-5)  # rows of x strided: a slice of a wider tensor
            assert y is not None and y.is_contiguous()
            _close(y, F.rms_norm(x.float(), (width,), w, 1e-5))
            # the decoder's norm takes it in an eager step
            assert torch.equal(rms_norm(x, w.to(dtype), w, 1e-5), y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_rotates_each_head_of_strided_rows(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(2)
    for rows in ROWS:
        for heads, dim in ((12, 64), (3, 128), (5, 32)):
            qkv = torch.randn(rows, (heads + 2) * dim, generator=gen).to(dtype)
            qk = qkv[:, :heads * dim].view(rows, heads, dim)  # as the decoder slices q and k
            angle = torch.rand(rows, 1, dim // 2, generator=gen) * 6.3
            cos = torch.cat((angle.cos(), angle.cos()), -1).to(dtype)
            sin = torch.cat((-angle.sin(), angle.sin()), -1).to(dtype)
            y = elementwise.rope(qk, cos, sin)
            assert y is not None and y.is_contiguous()
            q, c, s = qk.float(), cos.float(), sin.float()
            half = dim // 2
            _close(y, q * c + torch.cat((q[..., half:], q[..., :half]), -1) * s)
            assert torch.equal(rotary(qk, cos, sin), y)
            # the rotation keeps each pair's length (what the table's sign layout means)
            pair = y.float()[..., :half] ** 2 + y.float()[..., half:] ** 2
            want = q[..., :half] ** 2 + q[..., half:] ** 2
            torch.testing.assert_close(pair, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_is_silu_of_the_gate_times_up(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    for rows in ROWS:
        for inter in (1536, 37):
            gu = (torch.randn(rows, 2 * inter, generator=gen) * 4).to(dtype)
            y = elementwise.swiglu(gu)
            assert y is not None and y.shape == (rows, inter)
            _close(y, F.silu(gu[:, :inter].float()) * gu[:, inter:].float())
            assert torch.equal(swiglu(gu), y)


def test_they_decline_what_the_library_does_not_take() -> None:
    w = torch.ones(64)
    assert elementwise.rms_norm(torch.randn(4, 64, dtype=torch.float16), w, 1e-6) is None
    assert elementwise.rms_norm(torch.randn(64, 4).t(), w, 1e-6) is None  # columns not contiguous
    assert elementwise.rms_norm(torch.randn(4, 64), w.bfloat16(), 1e-6) is None  # weight not fp32
    assert elementwise.swiglu(torch.randn(8, 4).t()) is None
    qk, table = torch.randn(2, 3, 8), torch.randn(2, 1, 8)
    assert elementwise.rope(qk, table.bfloat16(), table.bfloat16()) is None  # dtypes differ
    assert elementwise.rope(qk.transpose(0, 1), table, table) is None  # heads not contiguous
    # and the decoder then runs torch's ops
    half = torch.randn(4, 64, dtype=torch.float16)
    assert rms_norm(half, w.half(), w, 1e-6).dtype == torch.float16
