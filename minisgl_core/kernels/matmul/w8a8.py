"""int8 matmul kernels for ``--quantization int8``: int8 weights, per-token dynamic int8 inputs.

Weights are quantized once at load, symmetric per output channel (``q = round(W / s)``,
``s = max|W_row| / 127``). Each step's inputs are quantized per token (row) on the fly and the
int8 x int8 products are summed exactly in int32, then scaled back to fp32. Two kernels, behind
the same Kernel interface as the fp32 ones (base.py), timed against each other at load:

- ``int8`` (preferred): torch's fbgemm/x86 quantized engine (``quantized::linear_dynamic`` on a
  prepacked per-channel weight). It quantizes its whole input with one asymmetric uint8 scale
  (7 bits with reduce_range, which keeps AVX2's 16-bit pair sums from saturating), so each row is
  first scaled to max|x| = 1 and the result scaled back: that is per-token quantization.
- ``int8-intmm``: ``torch._int_mm`` on a ``[in, out]`` int8 weight, inputs quantized
  symmetrically per token to [-127, 127] in torch.

torch's weight-only ``_weight_int8pack_mm`` is not offered: on AVX2 hosts it measured 4-50x
slower than fp32. The embeddings, the LM head and q/k/v stay fp32 (see FP32_ROLES, role_scheme).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from minisgl_core.kernels import cpu_features
from minisgl_core.kernels.matmul.base import Kernel, add_bias_residual
from minisgl_core.kernels.schemes import QUANTIZATIONS

log = logging.getLogger(__name__)
# Layers left in fp32 under --quantization int8, besides the embedding lookup (not a matmul):
# the LM head and q/k/v. On the default model (perplexity over 1,024 tokens,
# docs/design/kernels.md, 4. int8 (W8A8)) every matmul in int8 cost +5.6%, all but the head
# +4.1%, all but head and q/k/v +1.3%: the residual stream has a few huge channels that
# per-token int8 inputs of q/k/v resolve poorly.
FP32_ROLES = frozenset({"lm_head", "qkv"})
# Weight-only modes keep their inputs unrounded, so that reason does not hold for them: every
# matmul is quantized. Under int4 the LM head takes int8-wo, as llama.cpp keeps its output
# matrix above 4 bits (the default model's GGUF stores it, the tied embedding, as Q8_0).


def role_scheme(role: str, quantization: str | None) -> str | None:
    """The scheme ``role``'s matmul runs under ``--quantization`` (None: the engine's dtype)."""
    if quantization is None or (quantization == "int8" and role in FP32_ROLES):
        return None
    if role == "lm_head" and quantization == "int4":
        return "int8-wo"
    return quantization


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    return set(cpu_features.host_flags())


def _has_vnni() -> bool:
    """Whether the CPU has VNNI (int8 dot products summed in 32 bits, never saturating) and
    MINISGL_CPU_FEATURES leaves it to the kernels."""
    return cpu_features.has("avx512_vnni") or (
        cpu_features.has("avx2") and bool(cpu_features.host_flags() & {"avx_vnni"}))


# The fbgemm kernel's inputs: 8 bits on VNNI hosts; 7 bits elsewhere, because AVX2's pairwise
# u8 x s8 products are summed in 16 bits and two large ones could saturate (torch's default).
REDUCE_RANGE = not _has_vnni()


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``W [out, in]`` -> (int8 ``q [out, in]``, fp32 ``scale [out]``): ``W ~= q * scale``."""
    w = weight.float()
    scale = (w.abs().amax(1) / 127.0).clamp_min(1e-12)
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def _row_scale(x: torch.Tensor) -> torch.Tensor:
    """``max |x|`` of each row, ``[T, 1]`` (never 0: a zero row stays zero)."""
    # abs + amax: 13x faster on CPU than linalg.vector_norm(ord=inf) at [32, 1536]
    return x.abs().amax(1, keepdim=True).clamp_min_(1e-12)


@contextlib.contextmanager
def _engine(name: str) -> Iterator[None]:
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        with warnings.catch_warnings():  # torch marks quantized tensors deprecated
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.backends.quantized.engine = old


class _Int8(Kernel):
    quantized = "int8"

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Runs, and matches its own reference math, on a small random layer."""
        if device.type != "cpu" or dtype != torch.float32:
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 32, generator=gen), torch.randn(5, 32, generator=gen)
        try:
            y = self.run(self.pack(w), x, None, None)
        except (RuntimeError, AttributeError, NotImplementedError) as exc:
            log.info("int8 kernel %s unavailable: %s", self.name, exc)
            return False
        ref = self.reference(*quantize_weight(w), x)
        return bool(torch.allclose(y, ref, rtol=1e-3, atol=1e-3 * float(ref.abs().max())))

    def reference(self, q: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """What ``run`` computes, in plain fp32 (dequantize both sides, then matmul)."""
        raise NotImplementedError


class Int8Dynamic(_Int8):
    """fbgemm/x86 engine: ``quantized::linear_dynamic`` on a prepacked per-channel weight."""

    name = layout = "int8"

    def __init__(self) -> None:
        engines = torch.backends.quantized.supported_engines
        self.engine = next((e for e in ("x86", "fbgemm") if e in engines), "")

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        return bool(self.engine) and super().available(device, dtype)

    def pack(self, weight: torch.Tensor) -> Any:
        q, scale = quantize_weight(weight)
        with _engine(self.engine):
            qw = torch._make_per_channel_quantized_tensor(
                q, scale.double(), torch.zeros_like(scale, dtype=torch.int64), 0)
            return torch.ops.quantized.linear_prepack(qw, None)

    def run(self, packed: Any, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        if x.shape[0] == 1:  # one row: the tensor's scale is the token's
            y = torch.ops.quantized.linear_dynamic(x, packed, REDUCE_RANGE)
        else:
            s = _row_scale(x)  # [T, 1]
            y = torch.ops.quantized.linear_dynamic(x / s, packed, REDUCE_RANGE).mul_(s)
        return add_bias_residual(y, bias, residual)

    def nbytes(self, packed: Any) -> int:
        w, _ = packed.unpack()
        return int(w.numel() + w.size(0) * 8)  # int8 values + a double scale per channel

    def reference(self, q: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        s = torch.ones(x.shape[0], 1) if x.shape[0] == 1 else _row_scale(x)
        xs = x / s
        x_scale, x_zero = torch._choose_qparams_per_tensor(xs, REDUCE_RANGE)
        # reduce_range narrows the chosen scale, but fbgemm still clamps to uint8's [0, 255]
        # as fbgemm rounds: fma(x, fp32 inverse scale, zero point), then to nearest
        inverse = torch.full_like(xs, 1.0 / torch.tensor(x_scale, dtype=torch.float32).item())
        xq = torch.clamp(torch.round(torch.addcmul(torch.full_like(xs, float(x_zero)), xs,
                                                   inverse)), 0, 255)
        xd = (xq - x_zero) * x_scale
        return (xd @ (q.float() * scale[:, None]).t()) * s


class Int8IntMM(_Int8):
    """``torch._int_mm`` (int8 x int8 -> int32) with symmetric per-token inputs in torch."""

    name = layout = "int8-intmm"

    def pack(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, scale = quantize_weight(weight)
        return q.t().contiguous(), scale  # [in, out] int8, [out] fp32

    def run(self, packed: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor,
            bias: torch.Tensor | None, residual: torch.Tensor | None) -> torch.Tensor:
        q, scale = packed
        s = _row_scale(x).div_(127.0)  # [T, 1]
        xq = torch.round(x / s).to(torch.int8)
        y = torch._int_mm(xq, q).float().mul_(s).mul_(scale)
        return add_bias_residual(y, bias, residual)

    def nbytes(self, packed: tuple[torch.Tensor, torch.Tensor]) -> int:
        return int(packed[0].numel() + packed[1].numel() * 4)

    def reference(self, q: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        s = _row_scale(x) / 127.0
        xd = torch.round(x / s).clamp(-127, 127) * s
        return xd @ (q.float() * scale[:, None]).t()


def int8_kernels() -> list[Kernel]:
    """The int8 candidates, in the order ties are broken."""
    return [Int8Dynamic(), Int8IntMM()]


def check_quantization(quantization: str | None) -> None:
    """ValueError unless ``quantization`` is None or a supported scheme."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)} (or unset), "
                         f"got {quantization!r}")

