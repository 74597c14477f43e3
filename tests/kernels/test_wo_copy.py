"""int4 panels with a copy of the weight beside them (matmul/wo_copy.py): each kernel against the
float64 product of the dequantized weight, in Python and in the C++ operator; the copy offered
only where it fits, and taken only where it is clearly faster."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minisgl_core.kernels import BUCKETS, Linear
from minisgl_core.kernels.matmul import wo_copy
from minisgl_core.kernels.matmul.choice import candidates, choose, layer_weights
from minisgl_core.kernels.matmul.weight_only import dequantize_int4
from minisgl_core.kernels.matmul.wo_panels import from_panels, q8_rows
from minisgl_core.kernels.native import ops as native_ops

CPU = torch.device("cpu")
KERNELS = {k.name: k for k in wo_copy.copy_kernels()}
# (out, in): the default model's q/k/v, outputs that fill no panel, a partial group
SHAPES = [(960, 576), (37, 100), (49, 31), (5, 33)]
ROWS = (1, 2, 3, 8, 17, 33, 64, 65)
BIG = 1 << 26  # weights: over MIN_WEIGHTS, a fraction of any host's memory share


def _works(name: str, dtype: torch.dtype) -> bool:
    return KERNELS[name].available(CPU, dtype)


CASES = [(n, d) for n in KERNELS for d in (torch.float32, torch.bfloat16) if _works(n, d)]


@pytest.mark.skipif(not CASES, reason="no int4 panels here (no AVX2, or no native library)")
@pytest.mark.parametrize(("name", "dtype"), CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_each_kernel_is_the_float64_product_of_the_dequantized_weight(name: str,
                                                                      dtype: torch.dtype) -> None:
    kernel, gen = KERNELS[name], torch.Generator().manual_seed(21)
    for out, inp in SHAPES:
        w = (torch.randn(out, inp, generator=gen) * 0.05).to(dtype)
        linear = Linear(w, None, kernel)  # every bucket this kernel; native where it is built
        assert linear.native == native_ops.available()  # the C++ operator knows the layout
        packed = linear.weight
        deq = dequantize_int4(from_panels(packed.panels))
        # the copy holds the panels' very values, rounded once to the dtype
        assert packed.dense.dtype == dtype and torch.equal(packed.dense, deq.to(dtype))
        for rows in ROWS:
            x = torch.randn(rows, inp, generator=gen).to(dtype)
            inputs = q8_rows(x).double() if kernel.rounds_inputs else x.double()
            ref = inputs @ packed.dense.double().t()
            for y in (kernel.run(packed, x, None, None), linear(x)):
                assert y.shape == (rows, out) and y.dtype == dtype
                err = float((y.double() - ref).abs().max() / ref.abs().max())
                assert err < (1e-2 if dtype == torch.bfloat16 else 1e-4), (out, inp, rows, err)


@pytest.mark.skipif(not CASES, reason="no int4 panels here (no AVX2, or no native library)")
def test_bias_and_residual_are_added_and_both_copies_counted_as_held_one_as_read() -> None:
    gen = torch.Generator().manual_seed(22)
    name, dtype = CASES[-1]
    w, bias = torch.randn(37, 100, generator=gen).to(dtype), torch.randn(37, generator=gen)
    linear = Linear(w, bias.to(dtype), KERNELS[name])
    x, res = torch.randn(20, 100, generator=gen).to(dtype), torch.randn(20, 37, generator=gen)
    plain = KERNELS[name].run(linear.weight, x, None, None).double()
    y = linear(x, res.to(dtype)).double()
    want = plain + bias.to(dtype).double() + res.to(dtype).double()
    assert float((y - want).abs().max() / want.abs().max()) < 1e-2
    panels = linear.weight.panels
    assert linear.nbytes() == (KERNELS[name].panels.nbytes(panels)
                               + 37 * 100 * linear.weight.dense.element_size() + 37 * 2)
    # a one-row step reads the panels alone: the roofline's bytes (bench/ceilings.py)
    assert linear.stored_nbytes() == KERNELS[name].panels.nbytes(panels) + 37 * 2


def test_the_copy_is_offered_only_where_it_fits(monkeypatch) -> None:
    monkeypatch.delenv(wo_copy.ENV, raising=False)
    assert layer_weights({"qkv": (3, 4), "down": (5, 6), "lm_head": (100, 4)}, 2) == 2 * (12 + 30)
    assert wo_copy.fits(BIG, torch.bfloat16)
    assert not wo_copy.fits(wo_copy.MIN_WEIGHTS - 1, torch.bfloat16)  # timed by noise
    assert not wo_copy.fits(1 << 50, torch.bfloat16)  # past any host's share
    monkeypatch.setenv(wo_copy.ENV, "0")
    assert not wo_copy.fits(BIG, torch.bfloat16)
    fp32 = torch.float32
    assert not any(k.copies for k in candidates("gate_up", CPU, fp32, "int4", copy_fits=False))
    offered = {k.name for k in candidates("gate_up", CPU, fp32, "int4", copy_fits=True)}
    assert ("int4-copy-dense" in offered) == _works("int4-copy-dense", fp32)
    assert not any(k.copies for k in candidates("lm_head", CPU, fp32, "int4", copy_fits=True))


def _timer(copy_gemm_s: float) -> object:
    """Every kernel 1 ms, but the dense kernel on the copy ``copy_gemm_s`` (it serves 17+ rows)."""
    def timer(kernel: object, packed: object, x: torch.Tensor) -> float:
        return copy_gemm_s if getattr(kernel, "name", "") == "int4-copy-dense" else 1e-3
    return timer


@pytest.mark.skipif(not _works("int4-copy-dense", torch.float32), reason="no int4 panels here")
def test_the_copy_is_taken_only_where_it_is_clearly_faster(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MINISGL_LINEAR", raising=False)
    monkeypatch.delenv(wo_copy.ENV, raising=False)
    shapes = {"gate_up": (96, 64)}

    def chosen(copy_gemm_s: float, where: Path) -> list[str]:
        choice = choose(shapes, CPU, torch.float32, "int4", cache=where, budget_s=600.0,
                        timer=_timer(copy_gemm_s), load=lambda: 0.0, copy_weights=BIG)
        return [k.name for k in choice.kernels["gate_up"]]

    # 1000x faster from 32 rows: the panels of the same layout for 1 and 8 rows, the copy after
    assert chosen(1e-6, tmp_path / "fast") == ["int4-copy-panels"] * 2 + ["int4-copy-dense"] * 3
    # 1% faster: not worth the copy's bytes; a layout without a copy
    slow = chosen(0.99e-3, tmp_path / "slow")
    assert len(slow) == len(BUCKETS) and not any(KERNELS.get(n) for n in slow)
