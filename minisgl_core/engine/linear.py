"""Matmul kernels for the model's linear layers, and the Linear that runs one per row bucket.

A kernel owns a weight layout (``pack``) and a way to run ``x [T, in] @ W.T`` on it (``run``).
Which kernel is fastest depends on the host and on the row count: on one 2-core AVX2 host dense
``torch.mm`` beat oneDNN's pre-packed weights at 1 row (27.4 vs 21.4 tok/s) and lost at 32 (193
vs 267). So kernel_choice.py times the candidates on the model's own shapes at load, and each
Linear keeps one layout and a kernel per row bucket (BUCKETS). ``MINISGL_LINEAR=<kernel>`` forces
one kernel everywhere it applies. The int8 kernels live in quant.py, the weight-only ones
(int8-wo, int4) in wo_quant.py.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from minisgl_core.engine import compiled_ops, native_ops
from minisgl_core.kernels import cpu_features

log = logging.getLogger(__name__)
# Row counts measured at load, one per bucket: decode batches (1, 8, 32) and prefill chunks (128+)
BUCKETS = (1, 8, 32, 128)
_BUCKET_TOP = (2, 16, 64)  # rows <= 2 use bucket 0, <= 16 bucket 1, <= 64 bucket 2, else 3
_MIN_ROWS = 4  # oneDNN's kernels for 1-3 rows were slower than for 4 on the first host measured


def bucket_of(rows: int) -> int:
    """The bucket (index into BUCKETS) a step of ``rows`` rows runs in."""
    for i, top in enumerate(_BUCKET_TOP):
        if rows <= top:
            return i
    return len(_BUCKET_TOP)


def padded_rows(rows: int, minimum: int = _MIN_ROWS) -> int:
    """Round a row count up to one of a few sizes: oneDNN caches one primitive per shape, and an
    unbounded set of shapes (every batch size, every prefill chunk) grows memory without end.
    ``minimum`` (fewer rows are padded up to it), then multiples of 8 up to 64, then of 32."""
    if rows <= minimum:
        return minimum
    step = 8 if rows <= 64 else 32
    return -(-rows // step) * step


def _mm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
        residual: torch.Tensor | None) -> torch.Tensor:
    """``x [T, in] @ w [in, out] (+ bias) (+ residual)``, the adds fused into the BLAS call."""
    if bias is not None:
        y = torch.addmm(bias, x, w)
        return y if residual is None else y + residual
    return torch.mm(x, w) if residual is None else torch.addmm(residual, x, w)


class Kernel:
    """One way to compute ``x @ W.T (+ b) (+ residual)``; kernels sharing a ``layout`` share the
    packed weight, so a Linear can switch between them by row count at no memory cost."""

    name = "?"
    layout = "?"
    quantized: str | None = None  # the --quantization scheme it needs (None: none)
    # True: ``pack`` keeps the HF weight itself, so a tensor shared with another use (a tied LM
    # head's embedding table) stays one copy in memory
    shares_weight = False

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether this kernel works (and gives right answers) here."""
        raise NotImplementedError

    def same_as(self, rows: int) -> str | None:
        """The kernel that does exactly what this one does at ``rows`` rows (None: none)."""
        return None

    def pack(self, weight: torch.Tensor) -> Any:
        """The private layout of an HF ``weight [out, in]``."""
        raise NotImplementedError

    def run(self, packed: Any, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        """``x [T, in]`` -> ``[T, out]``."""
        raise NotImplementedError

    def nbytes(self, packed: Any) -> int:
        """Memory held by the packed weight."""
        return int(packed.numel() * packed.element_size())


class Dense(Kernel):
    """``torch.mm`` on the transposed weight ``[in, out]``: any device, any dtype."""

    name = layout = "dense"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.t().contiguous()  # [in, out]

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return _mm(x, packed, bias, residual)


class DenseHF(Kernel):
    """``torch.mm`` on the HF weight ``[out, in]`` as it is (BLAS reads it transposed): no copy,
    so a tied LM head and the embedding lookup share one table."""

    name = "dense-hf"
    layout = "hf"
    shares_weight = True

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return True

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.contiguous()  # [out, in]: the same tensor when it is contiguous

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return _mm(x, packed.t(), bias, residual)


def bf16_fast() -> bool:
    """Whether oneDNN computes bf16 natively here (AVX512-BF16 or AMX, and not masked off by
    MINISGL_CPU_FEATURES): on an AVX2-only host its bf16 matmul is emulated, hundreds of times
    slower than fp32, and never a candidate."""
    if platform.machine() in ("x86_64", "AMD64") and not cpu_features.has("avx512_bf16"):
        return False
    try:
        return bool(torch.backends.mkldnn.is_available()
                    and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (RuntimeError, AttributeError):
        return False


class OneDNN(Kernel):
    """oneDNN with the weight pre-packed into its blocked layout (CPU, fp32, or bf16 where the
    host has AVX512-BF16/AMX), rows padded to a bounded set of sizes; ``minimum`` is the fewest
    rows it runs (1-3 rows padded up to it)."""

    layout = "onednn"

    def __init__(self, name: str = "onednn", minimum: int = _MIN_ROWS) -> None:
        self.name, self.minimum = name, minimum

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
            return False
        if not torch.backends.mkldnn.is_available():
            return False
        if dtype == torch.bfloat16 and not bf16_fast():
            return False
        try:
            w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(8, 8, dtype=dtype), 32)
            x = torch.ones(4, 8, dtype=dtype)
            y = torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
            return bool(torch.allclose(y.float(), torch.full((4, 8), 8.0)))
        except (RuntimeError, AttributeError) as exc:
            log.info("oneDNN linear unavailable (%s)", exc)
            return False

    def same_as(self, rows: int) -> str | None:
        return None if self.name == "onednn" or rows < _MIN_ROWS else "onednn"

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 32)

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        rows = x.shape[0]
        padded = padded_rows(rows, self.minimum)  # a bounded set of shapes: see padded_rows
        if padded != rows:
            x = F.pad(x, (0, 0, 0, padded - rows))
            if residual is not None:
                residual = F.pad(residual, (0, 0, 0, padded - rows))
        if residual is None:
            y = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
        else:
            y = torch.ops.mkldnn._linear_pointwise.binary(x, residual, packed, bias, "add")
        return y if padded == rows else y[:rows]

    def nbytes(self, packed: torch.Tensor) -> int:
        # an opaque tensor: its dtype's bytes per weight whatever the blocking
        return int(packed.numel() * (2 if packed.dtype == torch.bfloat16 else 4))


class OneDNNHF(OneDNN):
    """oneDNN on the HF weight ``[out, in]`` as it is (no pre-packing, no copy): slower than the
    packed layout from 4 rows up, faster than ``dense-hf`` there (5.5 vs 8.0 ms for the default
    model's LM head at 8 rows, on a 2-core Xeon); for a tied LM head."""

    layout = "hf"
    shares_weight = True

    def __init__(self) -> None:
        super().__init__("onednn-hf", 1)

    def same_as(self, rows: int) -> str | None:
        return None

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.contiguous()


def fp32_kernels() -> list[Kernel]:
    """The unquantized candidates (fp32 or bf16), in the order ties are broken."""
    from minisgl_core.engine.amx_hf import AmxHF

    return [OneDNN(), OneDNN("onednn-rows", 1), Dense(), DenseHF(), OneDNNHF(), AmxHF()]


def all_kernels() -> dict[str, Kernel]:
    """Every kernel by name (the quantized ones included)."""
    from minisgl_core.engine.quant import int8_kernels
    from minisgl_core.engine.wo_quant import weight_only_kernels

    wo = [*weight_only_kernels("int8-wo"), *weight_only_kernels("int4")]
    return {k.name: k for k in [*fp32_kernels(), *int8_kernels(), *wo]}


class Linear:
    """``y = x @ W.T + b`` for ``x [T, in]``, from an HF ``W [out, in]``; the layout is private.

    ``kernels``: one per bucket (BUCKETS), all of one layout; one kernel name means it for all.
    """

    __slots__ = ("__weakref__", "_table", "bias", "handle", "in_features", "kernels", "native",
                 "out_features", "weight")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None,
                 kernels: Sequence[Kernel] | Kernel | str) -> None:
        if isinstance(kernels, str):
            kernels = all_kernels()[kernels]
        if isinstance(kernels, Kernel):
            kernels = [kernels] * len(BUCKETS)
        if len(kernels) != len(BUCKETS) or len({k.layout for k in kernels}) != 1:
            raise ValueError("a Linear needs one kernel per bucket, all of one layout")
        self.out_features, self.in_features = weight.shape
        self.kernels = tuple(kernels)
        self.bias = bias
        self.weight = kernels[0].pack(weight)
        # rows -> kernel for the common small row counts (one tuple index per call)
        self._table = tuple(self.kernels[bucket_of(r)] for r in range(_BUCKET_TOP[-1] + 1))
        self.handle = compiled_ops.new_handle(self)  # what a compiled graph calls it by
        # True: the C++ operator runs it (same kernels, no Python per call; native_ops.py)
        self.native = native_ops.register(self)

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + b``, plus ``residual [T, out]`` when given (fused where the kernel can)."""
        if self.native:  # eager or traced alike: one dispatcher call
            return torch.ops.minisgl.native_linear(x, residual, self.handle)
        if torch.compiler.is_compiling():  # traced: the same kernel, behind an opaque op
            return torch.ops.minisgl.linear(x, residual, self.handle)
        return self.run_eager(x, residual)

    def run_eager(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``__call__`` outside a compiled graph: the row bucket's kernel on ``x``."""
        rows = x.shape[0]
        kernel = self._table[rows] if rows < len(self._table) else self.kernels[-1]
        return kernel.run(self.weight, x, self.bias, residual)

    @property
    def backend(self) -> str:
        """The kernel names by bucket, e.g. ``dense`` or ``dense/onednn/onednn/onednn``."""
        names = [k.name for k in self.kernels]
        return names[0] if len(set(names)) == 1 else "/".join(names)

    def nbytes(self) -> int:
        """Memory held by the weight (and bias)."""
        n = self.kernels[0].nbytes(self.weight)
        return n + (0 if self.bias is None else self.bias.numel() * self.bias.element_size())
