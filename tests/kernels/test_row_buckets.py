"""Row buckets: a step of N rows runs its bucket's kernel, in Python and in the C++ operator
alike, up to the fifth bucket (whole prefill chunks, 257 rows and more)."""

from __future__ import annotations

import pytest
import torch

from minisgl_core.kernels import BUCKETS, Linear, bucket_of
from minisgl_core.kernels.matmul.base import Kernel
from minisgl_core.kernels.matmul.weight_only import quantize_int4
from minisgl_core.kernels.matmul.wo_panels import (
    WeightOnlyPanels,
    WeightOnlyPanelsDequant,
    to_panels,
)

CPU = torch.device("cpu")


class Recording(Kernel):
    """``x @ W.T`` in torch, remembering that it ran; a name the C++ operator does not know."""

    layout = "recording"

    def __init__(self, bucket: int, ran: list[int]) -> None:
        self.name, self.bucket, self.ran = f"recording-{bucket}", bucket, ran

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        self.ran.append(self.bucket)
        return x @ packed.t()


def test_each_row_count_runs_its_bucket_s_kernel() -> None:
    assert BUCKETS == (1, 8, 32, 128, 512)
    tops = {2: 0, 3: 1, 16: 1, 17: 2, 64: 2, 65: 3, 256: 3, 257: 4, 512: 4, 4096: 4}
    assert {rows: bucket_of(rows) for rows in tops} == tops
    ran: list[int] = []
    lin = Linear(torch.randn(5, 7), None, [Recording(b, ran) for b in range(len(BUCKETS))])
    assert not lin.native
    for rows in tops:
        lin(torch.randn(rows, 7))
    assert ran == list(tops.values())


def test_the_operator_runs_the_fifth_bucket_s_kernel_from_257_rows() -> None:
    """The panels round their inputs to int8 and the dequantized GEMM does not, so each row
    count's result tells which of the two ran."""
    panels, dequant = WeightOnlyPanels("int4"), WeightOnlyPanelsDequant()
    if not dequant.available(CPU, torch.bfloat16):
        pytest.skip("no AVX512-BF16 (or no native library): no int4-panels-dequant here")
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(48, 96, generator=gen) * 0.05
    lin = Linear(weight, None, [panels] * (len(BUCKETS) - 1) + [dequant])
    packed = to_panels(quantize_int4(weight))
    for rows, kernel, other in ((256, panels, dequant), (257, dequant, panels),
                                (600, dequant, panels)):
        x = torch.randn(rows, 96, generator=gen).bfloat16()
        want = kernel.run(packed, x, None, None)
        assert not torch.equal(want, other.run(packed, x, None, None))
        assert torch.equal(lin(x), want), rows  # natively where the operators are built
        assert torch.equal(lin.run_eager(x), want), rows
