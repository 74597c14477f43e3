"""What every matmul kernel is: the ``Kernel`` interface, and the row buckets a Linear picks by.

A kernel owns a weight layout (``pack``) and a way to run ``x [T, in] @ W.T`` on it (``run``).
Which kernel is fastest depends on the host and on the row count, so each bucket of row counts
(BUCKETS) gets its own, measured at load (choice.py).
"""

from __future__ import annotations

from typing import Any

import torch

# Row counts measured at load, one per bucket: decode batches (1, 8, 32), short prefill chunks
# (128) and whole ones (512, the default max_prefill_tokens: a long prompt's steps, where a kernel
# 1.28x faster than another at 128 rows was 1.9x at 512)
BUCKETS = (1, 8, 32, 128, 512)
_BUCKET_TOP = (2, 16, 64, 256)  # rows <= 2 use bucket 0, <= 16 bucket 1, <= 64 bucket 2,
# <= 256 bucket 3, else 4
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


class Kernel:
    """One way to compute ``x @ W.T (+ b) (+ residual)``; kernels sharing a ``layout`` share the
    packed weight, so a Linear can switch between them by row count at no memory cost."""

    name = "?"
    layout = "?"
    quantized: str | None = None  # the --quantization scheme it needs (None: none)
    # True: ``pack`` keeps the HF weight itself, so a tensor shared with another use (a tied LM
    # head's embedding table) stays one copy in memory
    shares_weight = False
    # True: the inputs are rounded to int8 at the call (the panels); the LM head never takes it
    rounds_inputs = False
    # the kernel that does this one's work on rounded inputs, where this one does not round
    # them: offered only where that one is not (the LM head), being the slower of the two
    unrounded_twin_of: str | None = None
    # True: the layout keeps a second copy of the weight beside the first (matmul/wo_copy.py):
    # offered only where its bytes fit, taken only where it is clearly faster
    copies = False
    # True: takes fp32 rows at the cost of bf16 ones, whatever dtype it was chosen in, and
    # returns its fp32 sums unrounded: an LM head of such kernels gives fp32 logits
    fp32_rows = False

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether this kernel works (and gives right answers) here."""
        raise NotImplementedError

    def same_as(self, rows: int) -> str | None:
        """The kernel that does exactly what this one does at ``rows`` rows (None: none)."""
        return None

    def serves(self, rows: int) -> bool:
        """Whether the measured choice may give this kernel steps of ``rows`` rows (a kernel
        built for many rows is neither timed nor picked below them)."""
        return True

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

    def stored_nbytes(self, packed: Any) -> int:
        """Bytes of the weight in its stored format, what a one-row step reads (a copy kept
        beside it for many rows left out)."""
        return self.nbytes(packed)




def add_bias_residual(y: torch.Tensor, bias: torch.Tensor | None,
                      residual: torch.Tensor | None) -> torch.Tensor:
    """``y (+ bias) (+ residual)``, in place on ``y`` (a kernel's fresh output)."""
    if bias is not None:
        y = y.add_(bias)
    return y if residual is None else y.add_(residual)
