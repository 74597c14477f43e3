"""int4 panels with a copy of the same weight in the activations' dtype beside them: the panels
for the few rows of decode, the copy for the many rows of wide batches and prefill.

The panels round their inputs to int8 and sum on VNNI's dot product: the fastest at 1-8 rows,
where a step streams the weight from memory and int4 reads a quarter of bf16's bytes. From 32
rows on the arithmetic counts more than the bytes and a bf16 GEMM on AMX's tile multiply (or
oneDNN's) is faster: on the default model's layers, 1.2x the panels at 32 rows, and at 128 and
512 rows 1.7x and 1.4x the panels dequantized a tile at a time (docs/design/kernels.md, 20.). The
copy holds the panels' very values (``nib * scale + min``, rounded once to the dtype, as
``int4-panels-dequant`` makes them), so it computes what the dequantizing kernel does, without
rounding the inputs, at the price of the copy's bytes (2 a weight in bf16, 4 in fp32). The kernel
choice offers it only where those bytes fit (``fits``) and takes it only where it is faster by
COPY_MIN_GAIN (choice_rules.py); ``MINISGL_WEIGHT_COPY=0`` turns it off. On AMX hosts the panels'
AMX kernel is in the layout too: at a decode batch of 32 rows it reads a quarter of the copy's
bytes, and from memory it was 1.17x faster there (docs/design/kernels.md, 22.).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from minisgl_core.kernels.matmul.amx import AmxHF
from minisgl_core.kernels.matmul.base import Kernel
from minisgl_core.kernels.matmul.dense import DenseHF
from minisgl_core.kernels.matmul.weight_only import dequantize_int4, quantize_int4
from minisgl_core.kernels.matmul.wo_panels import (
    Int4Panels,
    WeightOnlyPanels,
    from_panels,
    to_panels,
)
from minisgl_core.kernels.matmul.wo_panels_amx import WeightOnlyPanelsAmx

# the copies of all layers together may take this share of the host's memory: 1.5 GiB of a
# 24 GiB host (the default model's bf16 copy is 0.2 GB; a 1.7B model's would be 2.8 GB, where
# the panels' fewer bytes matter more and the copy is not offered)
MEMORY_SHARE = 1 / 16
# the layout with the copy is taken only where its summed slowdown against each bucket's best
# is this much below the best layout without it: a copy that saves little is not worth its bytes
COPY_MIN_GAIN = 0.05
# A model of fewer weights in its layers (test models have thousands) times its matmuls in
# microseconds of dispatch and thread wake-up: the copy would be taken or not by noise
MIN_WEIGHTS = 1 << 24
ENV = "MINISGL_WEIGHT_COPY"


def fits(weights: int, dtype: torch.dtype) -> bool:
    """Whether a copy of ``weights`` weights in ``dtype`` (all layers together) may be kept: at
    least MIN_WEIGHTS of them, within MEMORY_SHARE of this host's memory, and not turned off by
    MINISGL_WEIGHT_COPY=0."""
    if weights < MIN_WEIGHTS or os.environ.get(ENV, "1").strip() == "0":
        return False
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return False
    return weights * torch.empty((), dtype=dtype).element_size() <= memory * MEMORY_SHARE


@dataclass(frozen=True)
class PanelsCopy:
    """The int4 panels and the weight they hold, ``dense [out, in]`` in the activations'
    dtype."""

    panels: Int4Panels
    dense: torch.Tensor


class CopyKernel(Kernel):
    """What the kernels of the panels-and-copy layout share: the layout, its packing and bytes."""

    quantized = "int4"
    layout = "int4-panels+copy"
    copies = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.panels = WeightOnlyPanels("int4")

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return self.panels.available(device, dtype)

    def pack(self, weight: torch.Tensor) -> PanelsCopy:
        panels = to_panels(quantize_int4(weight))
        dense = dequantize_int4(from_panels(panels)).to(weight.dtype)
        return PanelsCopy(panels, dense.contiguous())

    def nbytes(self, packed: PanelsCopy) -> int:
        dense = packed.dense.numel() * packed.dense.element_size()
        return self.panels.nbytes(packed.panels) + int(dense)

    def stored_nbytes(self, packed: PanelsCopy) -> int:
        return self.panels.nbytes(packed.panels)


class CopyPanels(CopyKernel):
    """The panels of the layout (``int4-panels``, for few rows)."""

    rounds_inputs = True

    def __init__(self) -> None:
        super().__init__("int4-copy-panels")

    def same_as(self, rows: int) -> str | None:
        return "int4-panels"  # the very kernel on the very bytes: timed once, as that one

    def run(self, packed: PanelsCopy, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return self.panels.run(packed.panels, x, bias, residual)


class CopyPanelsAmx(CopyKernel):
    """The panels of the layout on AMX (``int4-panels-amx``): a decode batch of 32 streams a
    quarter of the copy's bytes, which on a host short of bandwidth beats the copy's GEMM."""

    def __init__(self) -> None:
        super().__init__("int4-copy-panels-amx")
        self.amx = WeightOnlyPanelsAmx()

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return self.amx.available(device, dtype)

    def same_as(self, rows: int) -> str | None:
        return self.amx.name  # the very kernel on the very bytes: timed once, as that one

    def serves(self, rows: int) -> bool:
        return self.amx.serves(rows)

    def run(self, packed: PanelsCopy, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return self.amx.run(packed.panels, x, bias, residual)


class CopyGemm(CopyKernel):
    """A dense kernel (``amx-hf`` or ``dense-hf``) on the copy, inputs not rounded, from 17 rows
    (below, the panels read a quarter of the bytes)."""

    def __init__(self, dense: AmxHF | DenseHF) -> None:
        super().__init__(f"int4-copy-{dense.name.removesuffix('-hf')}")
        self.dense = dense

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return super().available(device, dtype) and self.dense.available(device, dtype)

    def serves(self, rows: int) -> bool:
        return rows > 16

    def run(self, packed: PanelsCopy, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return self.dense.run(packed.dense, x, bias, residual)


def copy_kernels() -> list[CopyKernel]:
    """The layout's kernels, in tie-break order (the panels first: they keep the fewest bytes)."""
    return [CopyPanels(), CopyPanelsAmx(), CopyGemm(AmxHF()), CopyGemm(DenseHF())]
