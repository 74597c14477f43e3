"""The C++ operators run every kernel exactly as the Python paths do: each matmul kernel they
know, at every row bucket, with and without bias and residual, in fp32 and bf16; the decode
attention against gather + SDPA; and a Linear they cannot run stays in Python."""

from __future__ import annotations

import gc

import pytest
import torch

from minisgl_core.kernels import Linear, all_kernels, sdpa_decode
from minisgl_core.kernels.native import ops as native_ops

pytestmark = pytest.mark.skipif(not native_ops.available(),
                                reason=f"no native operators: {native_ops.failure()}")
CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(native_ops.KINDS))
def test_each_kernel_runs_natively_as_in_python(name: str, dtype: torch.dtype) -> None:
    kernel = all_kernels()[name]
    if not kernel.available(CPU, dtype):
        pytest.skip(f"{name} does not run {dtype} here")
    gen = torch.Generator().manual_seed(len(name))
    w = (torch.randn(37, 300, generator=gen) / 17).to(dtype)  # odd widths, a partial int4 group
    for bias in (None, torch.randn(37, generator=gen).to(dtype)):
        lin = Linear(w, bias, kernel)
        assert lin.native
        for rows in (1, 2, 3, 8, 17, 33, 130):  # every row bucket, padded and not
            x = torch.randn(rows, 300, generator=gen).to(dtype)
            for residual in (None, torch.randn(rows, 37, generator=gen).to(dtype)):
                got = lin(x, residual)
                want = lin.run_eager(x, residual)
                assert got.shape == want.shape == (rows, 37) and got.dtype == want.dtype
                tol = 1e-5 if dtype == torch.float32 else 1e-2
                torch.testing.assert_close(got, want, atol=tol, rtol=tol, msg=f"{name} {rows}")


def test_a_kernel_it_does_not_know_stays_in_python() -> None:
    kernel = all_kernels()["int8-intmm"]  # W8A8: per-token input quantization in torch
    lin = Linear(torch.randn(16, 32), None, kernel)
    assert not lin.native
    x = torch.randn(3, 32)
    torch.testing.assert_close(lin(x), lin.run_eager(x))


def test_an_entry_goes_with_its_linear() -> None:
    lin = Linear(torch.randn(8, 16), None, "dense")
    handle = lin.handle
    torch.ops.minisgl.native_linear(torch.randn(1, 16), None, handle)
    del lin
    gc.collect()
    with pytest.raises(RuntimeError, match="no linear layer registered"):
        torch.ops.minisgl.native_linear(torch.randn(1, 16), None, handle)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length", [(1, 5), (3, 17), (8, 64)])
def test_decode_attention_matches_gather_and_sdpa(dtype: torch.dtype, batch: int,
                                                  length: int, monkeypatch) -> None:
    gen = torch.Generator().manual_seed(batch * 100 + length)
    k_cache = torch.randn(200, 3, 64, generator=gen).to(dtype)  # [slots, Hkv, D]
    v_cache = torch.randn(200, 3, 64, generator=gen).to(dtype)
    q = torch.randn(batch, 9, 64, generator=gen).to(dtype)  # [B, Hq, D]
    kv_index = torch.randint(0, 200, (batch * length,), generator=gen)
    mask = torch.rand(batch, 1, 1, length, generator=gen) > 0.3
    mask[..., 0] = True  # every row sees a key
    for m in (None, mask):
        want = sdpa_decode(q, k_cache, v_cache, kv_index, m, 0.125)
        got = torch.ops.minisgl.native_decode_attention(q, k_cache, v_cache, kv_index, m, 0.125)
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
        monkeypatch.setenv("MINISGL_ATTENTION", "sdpa")  # the operator's own SDPA path
        torch.testing.assert_close(
            torch.ops.minisgl.native_decode_attention(q, k_cache, v_cache, kv_index, m, 0.125),
            want, atol=tol, rtol=tol)
        monkeypatch.delenv("MINISGL_ATTENTION")


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 11, 33])
@pytest.mark.parametrize("shape", [(37, 300), (960, 576), (576, 1536), (5, 96), (3, 32)])
def test_int4_against_bf16_rows_is_the_exact_product(shape: tuple[int, int], rows: int) -> None:
    from minisgl_core.kernels.matmul.weight_only import dequantize_int4, quantize_int4
    from minisgl_core.kernels.native import library as native

    out, inp = shape  # partial last blocks (300: 2 groups and 12 inputs past 4-group blocks)
    gen = torch.Generator().manual_seed(out)
    w = quantize_int4(torch.randn(out, inp, generator=gen) / 20)
    x = torch.randn(rows, inp, generator=gen).to(torch.bfloat16)
    y = torch.full((rows, out), float("nan"))
    lib = native.library()
    done = lib.wo_int4_bf16(x.data_ptr(), rows, inp, w.q.data_ptr(), w.scale.data_ptr(),
                            w.min.data_ptr(), out, y.data_ptr(), 2)
    if done != 0:
        pytest.skip("no AVX512-BF16 here")
    # bf16 inputs times 1 + nib / 16 are exact in fp32: only the order of the sums differs
    torch.testing.assert_close(y, x.float() @ dequantize_int4(w).t(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape,rows", [((37, 300), slice(0, 37)), ((960, 576), slice(5, 700))])
def test_int4_tile_into_bf16_is_the_fp32_weight_rounded_once(shape: tuple[int, int],
                                                              rows: slice) -> None:
    from minisgl_core.kernels.matmul.weight_only import dequantize_int4, quantize_int4
    from minisgl_core.kernels.native import library as native

    gen = torch.Generator().manual_seed(shape[0])
    w = quantize_int4(torch.randn(*shape, generator=gen) / 20)
    out = torch.empty(rows.stop - rows.start, shape[1], dtype=torch.bfloat16)
    if native.library().wo_int4_dequant_bf16(w.q.data_ptr(), w.scale.data_ptr(),
                                             w.min.data_ptr(), shape[1], rows.start, rows.stop,
                                             out.data_ptr(), 2) != 0:
        pytest.skip("no AVX512-BF16 here")
    assert torch.equal(out, dequantize_int4(w, rows).to(torch.bfloat16))
