"""The native paged decode attention equals gather + SDPA on every path this CPU runs (plain C,
AVX2, AVX-512), in fp32 and bf16, with grouped-query heads, masks and odd sizes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minisgl_core.kernels import attention as native_attention
from minisgl_core.kernels import cpu_features
from minisgl_core.kernels.attention import decode_attention, sdpa_decode
from minisgl_core.kernels.native import library as native

_HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(native.library() is None,
                                reason=f"native library not built: {native.failure()}")
ISAS = [i for i in native.ISAS.values() if i <= native.best_isa()]
# the shapes the kernel has bodies of its own for (head sizes 64, 128, 256), beside others
SHAPES = [
    (1, 1, 1, 1, 64, False), (1, 37, 9, 3, 64, False), (2, 16, 8, 8, 32, True),
    (3, 50, 12, 3, 80, True), (8, 129, 9, 3, 64, True), (33, 7, 4, 2, 128, True),
    (5, 40, 16, 4, 64, True), (3, 20, 4, 4, 128, False), (2, 33, 8, 2, 256, True),
    (2, 9, 2, 2, 256, False), (4, 21, 10, 2, 64, True), (3, 48, 20, 4, 64, True),
]
# pairs (sequence, KV head) that do not share evenly over 2 or 3 threads, each with enough keys
# for the kernel to split them into chunks merged per pair: one sequence, a batch whose padding
# fills whole chunks, a last chunk shorter than the others, one KV head, a head size of its own
SPLIT_SHAPES = [
    (1, 700, 9, 3, 64, False), (3, 800, 9, 3, 64, True), (1, 1537, 4, 1, 256, False),
    (5, 790, 6, 3, 80, True), (2, 900, 8, 1, 128, True),
]


def _case(batch: int, length: int, hq: int, hkv: int, d: int, dtype: torch.dtype,
          masked: bool, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    slots = 4 * batch * length + 16
    k = torch.randn(slots, hkv, d, generator=g).to(dtype)
    v = torch.randn(slots, hkv, d, generator=g).to(dtype)
    q = torch.randn(batch, hq, d, generator=g).to(dtype)
    index = torch.randperm(slots, generator=g)[:batch * length]
    mask = None
    if masked:  # each row attends to a prefix of its keys (the rest is padding), at least one
        lens = torch.randint(1, length + 1, (batch,), generator=g)
        mask = (torch.arange(length) < lens.unsqueeze(1))[:, None, None, :]
    return q, k, v, index, mask


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("batch", "length", "hq", "hkv", "d", "masked"), SHAPES)
def test_native_decode_equals_gather_and_sdpa(isa, dtype, batch, length, hq, hkv, d,
                                              masked) -> None:
    _check(batch, length, hq, hkv, d, dtype, masked, isa)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("batch", "length", "hq", "hkv", "d", "masked"), SPLIT_SHAPES)
def test_keys_split_in_chunks_give_the_same(threads, dtype, batch, length, hq, hkv, d,
                                             masked) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for isa in ISAS:
            _check(batch, length, hq, hkv, d, dtype, masked, isa)
    finally:
        torch.set_num_threads(before)


def _check(batch: int, length: int, hq: int, hkv: int, d: int, dtype: torch.dtype,
           masked: bool, isa: int) -> None:
    q, k, v, index, mask = _case(batch, length, hq, hkv, d, dtype, masked)
    if masked:  # a padded key's slot is any number: never read (its row could hold NaN)
        index.view(batch, length)[~mask.view(batch, length)] = 1 << 40
    got = native_attention.decode(q, k, v, index, mask, d ** -0.5, isa=isa)
    want = sdpa_decode(q.float(), k.float(), v.float(), index.clamp(max=k.shape[0] - 1), mask,
                       d ** -0.5)
    assert got is not None and got.dtype == dtype and got.shape == (batch, hq * d)
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: the output's own rounding
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


@pytest.mark.skipif(not cpu_features.has("avx512_bf16"), reason="no AVX512-BF16 to mask away")
def test_avx512_without_bf16_widens_the_keys_and_gives_the_same() -> None:
    """Where AVX512-BF16 is missing (Intel before Cooper Lake) bf16 keys are widened to fp32 for
    the scores instead of taken in pairs: that path, run under a mask in a child process."""
    code = ("import torch, test_engine_native_attention as t\n"
            "for case in t.SHAPES: t._check(*case[:5], torch.bfloat16, case[5], 2)\n")
    env = cpu_features.masked_env("avx512_vnni")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(_HERE), timeout=300,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_sizes_beyond_the_kernel_fall_back_to_sdpa() -> None:
    q, k, v, index, mask = _case(2, 5, 34, 2, 64, torch.float32, True)  # 17 q heads per kv head
    assert native_attention.decode(q, k, v, index, mask, 0.125) is None
    torch.testing.assert_close(decode_attention(q, k, v, index, mask, 0.125),
                               sdpa_decode(q, k, v, index, mask, 0.125))


def test_sdpa_can_be_forced(monkeypatch) -> None:
    q, k, _, _, _ = _case(1, 4, 2, 1, 8, torch.float32, False)
    assert native_attention.usable(q, k)
    monkeypatch.setenv("MINISGL_ATTENTION", "sdpa")
    assert not native_attention.usable(q, k)
