"""The batch-invariant kernels of --deterministic: each row's result has the same bits whatever
the other rows of the call, and is the right result (against torch within rounding)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minisgl_core.kernels import all_kernels, invariant
from minisgl_core.kernels.matmul.invariant import Invariant

DTYPES = [torch.float32, torch.bfloat16]
# rows alone, in small and large calls, and at odd offsets (the 2-row tiles, the 64-row blocks)
COUNTS = (1, 2, 3, 7, 32, 65, 200)


@pytest.fixture(autouse=True)
def _two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # work split over threads, as when serving
    yield
    torch.set_num_threads(before)


def _rows_invariant(run, x: torch.Tensor, *per_row: torch.Tensor) -> None:
    """``run(x[:n], *rows[:n])`` for every n in COUNTS agrees with the whole call bit for bit,
    and so does each row run alone."""
    full = run(x, *per_row)
    for n in COUNTS:
        assert torch.equal(run(x[:n], *(t[:n] for t in per_row)), full[:n]), f"{n} rows"
    for i in range(0, x.shape[0], 29):
        alone = run(x[i:i + 1], *(t[i:i + 1] for t in per_row))
        assert torch.equal(alone, full[i:i + 1]), f"row {i} alone"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("out", "inp"), [(64, 64), (200, 37), (1728, 576)])
def test_invariant_matmul_rows_do_not_depend_on_the_call(dtype, out, inp) -> None:
    gen = torch.Generator().manual_seed(out)
    w = torch.randn(out, inp, generator=gen).to(dtype)
    bias = torch.randn(out, generator=gen).to(dtype)
    x = torch.randn(200, inp, generator=gen).to(dtype)
    residual = torch.randn(200, out, generator=gen).to(dtype)
    kernel = Invariant()
    packed = kernel.pack(w)
    _rows_invariant(lambda a, r: kernel.run(packed, a, bias, r), x, residual)
    _rows_invariant(lambda a: kernel.run(packed, a, None, None), x)
    want = x.double() @ w.double().t() + bias.double() + residual.double()
    got = kernel.run(packed, x, bias, residual)
    # fp32: sums of `inp` products; bf16: the output's own rounding (8 bits) dominates
    tol = 1e-4 if dtype == torch.float32 else 2 ** -7
    assert got.dtype == dtype
    assert ((got.double() - want).abs() <= tol * (1 + want.abs())).all()


@pytest.mark.parametrize("name", ["int8-wo-invariant", "int4-invariant"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_weight_only_invariant_kernels(name, dtype) -> None:
    kernel = all_kernels()[name]
    gen = torch.Generator().manual_seed(3)
    packed = kernel.pack(torch.randn(320, 576, generator=gen))
    x = torch.randn(200, 576, generator=gen).to(dtype)
    _rows_invariant(lambda a: kernel.run(packed, a, None, None), x)


def _reference_attention(q, k_cache, v_cache, slots, row_seq, positions, scale, window):
    out = []
    for t in range(q.shape[0]):
        n = int(positions[t]) + 1
        first = max(0, n - window) if window else 0
        keys = slots[row_seq[t], first:n]
        k = k_cache[keys].float().transpose(0, 1)  # [Hkv, n, D]
        v = v_cache[keys].float().transpose(0, 1)
        o = F.scaled_dot_product_attention(q[t].float()[:, None], k, v, scale=scale,
                                           enable_gqa=True)  # [Hq, 1, D]
        out.append(o.reshape(-1))
    return torch.stack(out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window", [0, 5])
def test_invariant_attention_matches_sdpa_and_ignores_the_batch(dtype, window) -> None:
    gen = torch.Generator().manual_seed(5)
    hq, hkv, d, slots_total = 4, 2, 16, 96
    k_cache = torch.randn(slots_total, hkv, d, generator=gen).to(dtype)
    v_cache = torch.randn(slots_total, hkv, d, generator=gen).to(dtype)
    # three sequences of 9, 30 and 17 keys over shuffled slots; rows: decode-like and prefill-like
    perm = torch.randperm(slots_total, generator=gen)
    lens = [9, 30, 17]
    slots = torch.zeros(3, 30, dtype=torch.int64)
    start = 0
    for s, n in enumerate(lens):
        slots[s, :n] = perm[start:start + n]
        start += n
    row_seq = torch.tensor([0, 1, 2] + [1] * 12 + [2] * 5)
    positions = torch.tensor([8, 29, 16] + list(range(18, 30)) + list(range(12, 17)))
    q = torch.randn(len(row_seq), hq, d, generator=gen).to(dtype)
    scale = d ** -0.5
    got = invariant.attention(q, k_cache, v_cache, slots, row_seq, positions, scale, window)
    want = _reference_attention(q, k_cache, v_cache, slots, row_seq, positions, scale, window)
    tol = 1e-5 if dtype == torch.float32 else 2 ** -7
    assert torch.allclose(got.float(), want, atol=tol, rtol=tol)
    # each row alone, against a table of only its own sequence (no other, no padding)
    for t in range(len(row_seq)):
        own = slots[row_seq[t]:row_seq[t] + 1, :lens[row_seq[t]]]
        alone = invariant.attention(q[t:t + 1], k_cache, v_cache, own, torch.tensor([0]),
                                    positions[t:t + 1], scale, window)
        assert torch.equal(alone, got[t:t + 1]), f"row {t}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [64, 576, 1536])
def test_torch_ops_between_the_matmuls_are_row_invariant(dtype, width) -> None:
    # --deterministic keeps torch's RMSNorm, SiLU and softmax (kernels/invariant.py): checked
    # here, on this host's torch, to give each row the same bits in a call of any row count
    gen = torch.Generator().manual_seed(width)
    x = torch.randn(200, width, generator=gen).to(dtype)
    w = torch.randn(width, generator=gen).to(dtype)
    gate_up = torch.randn(200, 2 * width, generator=gen).to(dtype)
    _rows_invariant(lambda a: invariant.rms_norm(a, w, 1e-6), x)
    _rows_invariant(invariant.swiglu, gate_up)
    _rows_invariant(lambda a: torch.softmax(a.float(), -1), x)
    _rows_invariant(lambda a: torch.log_softmax(a.float(), -1), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_plain_c_avx2_and_avx512_matmuls_agree(dtype) -> None:
    # the same 16 partial sums and tree in every copy (fmaf, no reassociation): the copies this
    # host can run give the same bits
    from minisgl_core.kernels.native import library as native

    lib = native.library()
    gen = torch.Generator().manual_seed(9)
    w = torch.randn(70, 37, generator=gen).to(dtype)
    x = torch.randn(9, 37, generator=gen).to(dtype)
    outs = []
    # bf16 on AVX512-BF16 takes its pairwise dot product instead: another order, on every row
    top = native.best_isa() - (dtype == torch.bfloat16 and lib.wo_has_bf16() == 1)
    for isa in range(top + 1):
        y = torch.empty(9, 70, dtype=dtype)
        assert lib.bi_matmul(x.data_ptr(), 9, 37, w.data_ptr(), 70, None, None, y.data_ptr(),
                             int(dtype == torch.bfloat16), isa) == 0
        outs.append(y)
    assert all(torch.equal(y, outs[0]) for y in outs)
