"""The ``Linear`` a model layer calls: one kernel per row bucket, all sharing one weight layout.

Each Linear keeps the kernels the measured choice gave it (matmul/choice.py) and runs the one of
its row count's bucket; where the C++ operators are built it is one dispatcher call
(native/ops.py), in a compiled graph an opaque op (ops.py). ``MINISGL_LINEAR=<kernel>`` forces
one kernel everywhere it applies.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minisgl_core.kernels import ops
from minisgl_core.kernels.matmul.base import _BUCKET_TOP, BUCKETS, Kernel, bucket_of
from minisgl_core.kernels.matmul.registry import all_kernels
from minisgl_core.kernels.matmul.weight_only import Int8Weight
from minisgl_core.kernels.matmul.wo_panels import Int8Panels, int8_panel_rows
from minisgl_core.kernels.native import ops as native_ops


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
        self.handle = ops.new_handle(self)  # what a compiled graph calls it by
        # True: the C++ operator runs it (same kernels, no Python per call; native/ops.py)
        self.native = native_ops.register(self)

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + b``, plus ``residual [T, out]`` when given (fused where the kernel can)."""
        compiling = torch.compiler.is_compiling()
        if self.native and (not compiling or ops.native_in_graph()):  # one dispatcher call
            return torch.ops.minisgl.native_linear(x, residual, self.handle)
        if compiling:  # traced: the same kernel, behind an opaque op
            return torch.ops.minisgl.linear(x, residual, self.handle)
        return self.run_eager(x, residual)

    def run_eager(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``__call__`` outside a compiled graph: the row bucket's kernel on ``x``."""
        rows = x.shape[0]
        kernel = self._table[rows] if rows < len(self._table) else self.kernels[-1]
        return kernel.run(self.weight, x, self.bias, residual)

    @property
    def fp32_rows(self) -> bool:
        """Whether every bucket's kernel takes fp32 rows at the cost of bf16 ones and returns its
        fp32 sums unrounded. An LM head then gives fp32 logits whatever the activations: bf16
        keeps 8 significant bits of a logit, so near-equal tokens (within 1/128 of its size) tie and
        greedy decoding takes the lower id, where the head's own sums tell them apart."""
        return all(k.fp32_rows for k in self.kernels)

    @property
    def serves_rows(self) -> bool:
        """Whether ``rows`` can read weight rows from the packed layout (an int8 weight-only
        one: a tied LM head then stands for the embedding table, which is not kept)."""
        return isinstance(self.weight, Int8Weight | Int8Panels)

    def rows(self, index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``index [T]`` of ``W`` as ``[T, in]`` in ``dtype`` (needs ``serves_rows``)."""
        w = self.weight  # q [out, in] int8, scale [out]: row v is q[v] * scale[v]
        if isinstance(w, Int8Panels):
            return int8_panel_rows(w, index, dtype)
        rows = w.q.index_select(0, index).to(dtype)
        return rows * w.scale.index_select(0, index).to(dtype).unsqueeze(1)

    @property
    def backend(self) -> str:
        """The kernel names by bucket, e.g. ``dense`` or ``dense/onednn/onednn/onednn``."""
        names = [k.name for k in self.kernels]
        return names[0] if len(set(names)) == 1 else "/".join(names)

    def nbytes(self) -> int:
        """Memory held by the weight (and bias)."""
        return self.kernels[0].nbytes(self.weight) + self._bias_nbytes()

    def stored_nbytes(self) -> int:
        """Bytes of the weight in its stored format (and bias): what a one-row step reads, a
        copy of the weight kept for many rows left out."""
        return self.kernels[0].stored_nbytes(self.weight) + self._bias_nbytes()

    def tensors(self) -> list[torch.Tensor]:
        """The tensors the weight (in its kernels' layout) and the bias are stored in; a
        library's opaque packed weight has none to give."""
        bias = [] if self.bias is None else [self.bias]
        return [*native_ops.layout_tensors(self.weight), *bias]

    def _bias_nbytes(self) -> int:
        return 0 if self.bias is None else self.bias.numel() * self.bias.element_size()


LAYER_MATMULS = ("qkv", "o", "gate_up", "down")  # a decoder layer's Linears


def model_linears(model: object) -> list[Linear]:
    """A decoder model's matmul Linears: each layer's q/k/v, o, gate/up and down, and the LM
    head where this rank has it (a plugin model without them: none)."""
    found = [getattr(layer, n) for layer in getattr(model, "layers", ()) for n in LAYER_MATMULS]
    found.append(getattr(model, "lm_head", None))
    return [lin for lin in found if isinstance(lin, Linear)]


def model_weight_bytes(model: object, ranks: int = 1) -> int:
    """Bytes of a model's matmul weights as stored: what a one-row decode step reads. Under
    tensor parallelism ``model`` is one rank's of ``ranks``, whose layers hold an even share
    (the LM head only on rank 0): the whole model's, as this rank counts them."""
    head = getattr(model, "lm_head", None)
    own = head.stored_nbytes() if isinstance(head, Linear) else 0
    return own + ranks * (sum(lin.stored_nbytes() for lin in model_linears(model)) - own)

