"""Every matmul kernel by name, and the candidates of each kind: the one list to extend."""

from __future__ import annotations

from minisgl_core.kernels.matmul.amx import AmxHF
from minisgl_core.kernels.matmul.base import Kernel
from minisgl_core.kernels.matmul.dense import Dense, DenseHF, OneDNN, OneDNNHF
from minisgl_core.kernels.matmul.invariant import Invariant, WeightOnlyInvariant
from minisgl_core.kernels.matmul.w8a8 import int8_kernels
from minisgl_core.kernels.matmul.weight_only import (
    WeightOnlyAmx,
    WeightOnlyDequant,
    WeightOnlyNative,
)
from minisgl_core.kernels.matmul.wo_copy import copy_kernels
from minisgl_core.kernels.matmul.wo_gemm import WeightOnlyGemm
from minisgl_core.kernels.matmul.wo_panels import WeightOnlyPanels, WeightOnlyPanelsDequant
from minisgl_core.kernels.matmul.wo_panels_amx import WeightOnlyPanelsAmx
from minisgl_core.kernels.matmul.wo_panels_split import WeightOnlyPanelsSplit


def fp32_kernels() -> list[Kernel]:
    """The unquantized candidates (fp32 or bf16), in the order ties are broken."""
    return [OneDNN(), OneDNN("onednn-rows", 1), Dense(), DenseHF(), OneDNNHF(), AmxHF()]


def weight_only_kernels(scheme: str) -> list[Kernel]:
    """The candidates for ``--quantization int8-wo`` or ``int4``, in tie-break order (int4's
    panels with a copy beside them last: the choice offers them only where the copy fits)."""
    # the int4 panels on AMX or dequantized for torch's GEMM, or with a copy: no int8 twin
    int4_only = ([WeightOnlyPanelsAmx(), WeightOnlyPanelsDequant(scheme), *copy_kernels()]
                 if scheme == "int4" else [])
    int8_only = [WeightOnlyPanelsSplit()] if scheme == "int8-wo" else []  # for the LM head
    return [WeightOnlyNative(scheme), WeightOnlyPanels(scheme), WeightOnlyAmx(scheme),
            WeightOnlyGemm(scheme), WeightOnlyDequant(scheme), *int4_only, *int8_only]


def all_kernels() -> dict[str, Kernel]:
    """Every kernel by name (the quantized ones included)."""
    wo = [*weight_only_kernels("int8-wo"), *weight_only_kernels("int4"),
          *(WeightOnlyInvariant(s) for s in ("int8-wo", "int4"))]
    return {k.name: k for k in [*fp32_kernels(), Invariant(), *int8_kernels(), *wo]}


