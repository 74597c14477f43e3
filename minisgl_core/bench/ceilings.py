"""This host's ceilings, measured in the benchmark's own run, and a model's roofline from them.

Four rates, each the best of repeated runs over ``seconds`` with the benchmark's torch threads:
memory read bandwidth (``sum`` over a 256 MiB fp32 tensor, far larger than any cache), fp32 and
bf16 GEMM rates (``torch.mm`` of 1024 x 1024 matrices) and int8 GEMM rate (the faster of the
int8 kernels, kernels/matmul/w8a8.py, on 1024 rows of a 1024 x 1024 layer, counting 2 ops per
multiply-add). A model's decode ceiling at batch b is the roofline ``min(b x bandwidth / weight
bytes, rate / (2 x params))``: batch 1 reads every weight once per token; large batches do 2
FLOP per parameter per token, at the faster of the fp32 and bf16 rates (an engine may run its
weights in either: weight-only int4 on AMX multiplies in bf16) or the int8 rate for W8A8
layers. KV-cache reads and attention FLOPs are left out (small at these lengths).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minisgl_core.engine.config import ModelConfig

MIB = 1 << 20
MEASURE_S = 1.5  # each rate: the best of repeated runs over this long


@dataclass(frozen=True)
class Ceilings:
    """Host rates: bytes/s read from memory, fp32 and int8 multiply-add rates (ops/s)."""

    threads: int
    read_gb_s: float
    fp32_gflop_s: float
    int8_gop_s: float  # 0 when no int8 kernel works here
    bf16_gflop_s: float = 0.0  # 0 when not measured (bf16 emulated here)

    def best(self, other: Ceilings) -> Ceilings:
        """Each rate the higher of two measurements: this host's memory read moved by up to 1.7x
        within one session (28-47 GB/s on a 2-core Zen 4), so a run's ceilings are its best."""
        return Ceilings(self.threads, max(self.read_gb_s, other.read_gb_s),
                        max(self.fp32_gflop_s, other.fp32_gflop_s),
                        max(self.int8_gop_s, other.int8_gop_s),
                        max(self.bf16_gflop_s, other.bf16_gflop_s))

    @property
    def float_gflop_s(self) -> float:
        """The faster floating-point GEMM rate: fp32's, or bf16's where that is faster."""
        return max(self.fp32_gflop_s, self.bf16_gflop_s)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line for a report."""
        int8 = f"{self.int8_gop_s:.0f} GOP/s" if self.int8_gop_s else "n/a"
        return (f"host ceilings ({self.threads} threads, measured in this run): memory read "
                f"{self.read_gb_s:.1f} GB/s, fp32 GEMM {self.fp32_gflop_s:.0f} GFLOP/s, bf16 "
                f"GEMM {self.bf16_gflop_s:.0f} GFLOP/s, int8 GEMM {int8}")


@dataclass(frozen=True)
class ModelCost:
    """What one decode token costs a model: weight bytes read (batch 1) and matmul ops."""

    weight_bytes: int  # of every matmul weight, as stored (int4, int8, bf16 or fp32), no copy
    fp32_params: int  # matmul parameters run in floating point (fp32 or bf16)
    int8_params: int  # matmul parameters run in int8

    def roofline(self, c: Ceilings, batch: int) -> tuple[float, str]:
        """(tokens/s ceiling at ``batch``, "bandwidth" or "compute")."""
        memory = batch * c.read_gb_s * 1e9 / self.weight_bytes
        seconds = 2 * self.fp32_params / (c.float_gflop_s * 1e9)
        if self.int8_params:
            seconds += 2 * self.int8_params / (c.int8_gop_s * 1e9) if c.int8_gop_s else 0.0
        compute = 1 / seconds
        return (memory, "bandwidth") if memory < compute else (compute, "compute")


def model_cost(model: Any) -> ModelCost:
    """The decode cost of an engine's model (its layers' Linears and the LM head)."""
    from minisgl_core.kernels.linear import model_linears, model_weight_bytes

    fp32 = int8 = 0
    for lin in model_linears(model):
        params = lin.in_features * lin.out_features
        if lin.kernels[0].quantized == "int8":  # weight-only kernels compute in fp32
            int8 += params
        else:
            fp32 += params
    # without a copy for many rows (matmul/wo_copy.py)
    return ModelCost(model_weight_bytes(model), fp32, int8)


def _best_rate(work: float, fn: Callable[[], object], seconds: float) -> float:
    """``work`` per second of the fastest of repeated ``fn()`` calls within ``seconds``."""
    fn()  # warm-up
    best = float("inf")
    end = time.perf_counter() + seconds
    runs = 0
    while runs < 3 or time.perf_counter() < end:
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        runs += 1
    return work / best


def measure(seconds: float | None = None) -> Ceilings:
    """Measure the four rates with torch's current thread count (about 4 x ``seconds``, by
    default ``MEASURE_S``)."""
    import torch

    from minisgl_core.engine import huge_pages
    from minisgl_core.kernels import bf16_fast
    from minisgl_core.kernels.matmul.w8a8 import int8_kernels

    seconds = MEASURE_S if seconds is None else seconds

    with torch.inference_mode():
        # in huge pages where the host gives them, as the engine keeps its weights
        big = huge_pages.empty((256 * MIB // 4,), torch.float32, "cpu").fill_(1.0)
        read = _best_rate(big.numel() * 4, lambda: big.sum(), seconds) / 1e9
        n = 1024
        a, b = torch.randn(n, n), torch.randn(n, n)
        fp32 = _best_rate(2 * n ** 3, lambda: torch.mm(a, b), seconds) / 1e9
        bf16 = 0.0
        if bf16_fast():  # emulated elsewhere (AVX2): hundreds of times slower, never the faster
            ah, bh = a.bfloat16(), b.bfloat16()
            bf16 = _best_rate(2 * n ** 3, lambda: torch.mm(ah, bh), seconds) / 1e9
        int8 = 0.0
        cpu = torch.device("cpu")
        kernels = [k for k in int8_kernels() if k.available(cpu, torch.float32)]
        for k in kernels:
            packed = k.pack(b)
            int8 = max(int8, _best_rate(2 * n ** 3, lambda k=k, p=packed: k.run(p, a, None, None),
                                        seconds / len(kernels)) / 1e9)
    return Ceilings(torch.get_num_threads(), read, fp32, int8, bf16)


def layer_matmuls(model_dir: str) -> tuple[ModelConfig, dict[str, tuple[int, int]]]:
    """A model's config and one layer's matmuls by role as (outputs, inputs), fused as the engine
    fuses them (q/k/v, gate/up), from config.json alone."""
    from pathlib import Path

    from minisgl_core.engine.config import ModelConfig

    c = ModelConfig.from_dir(Path(model_dir))
    q, kv, inter, h = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, \
        c.intermediate_size, c.hidden_size
    return c, {"qkv": (q + 2 * kv, h), "o": (h, q), "gate_up": (2 * inter, h),
               "down": (h, inter)}


def config_cost(model_dir: str, quantization: str | None = None) -> ModelCost:
    """The decode cost of a model from its config.json alone (no weights loaded): every layer's
    q/k/v, o, gate/up and down matmuls plus the LM head, each stored as quant.role_scheme says
    (int8 and int8-wo: a byte a weight and a 4-byte scale per output channel; int4: 0.625 bytes
    a weight, scale and min included; else fp32)."""
    from minisgl_core.kernels.matmul.w8a8 import role_scheme

    c, layer = layer_matmuls(model_dir)
    shapes = {role: (c.num_layers * out, inp) for role, (out, inp) in layer.items()}
    shapes["lm_head"] = (c.vocab_size, c.hidden_size)  # (outputs, inputs)
    size = fp32 = int8 = 0
    for role, (out, inp) in shapes.items():
        scheme = role_scheme(role, quantization)
        if scheme in ("int8", "int8-wo"):
            size += out * inp + 4 * out
        elif scheme == "int4":
            size += out * inp * 5 // 8
        else:
            size += 4 * out * inp
        if scheme == "int8":  # weight-only schemes compute in fp32
            int8 += out * inp
        else:
            fp32 += out * inp
    return ModelCost(size, fp32, int8)


def gguf_cost(path: str | Path) -> ModelCost:
    """The decode cost of a GGUF file as llama.cpp runs it, from the bytes its tensors are
    stored in: every matrix but the token embedding (a row read per token), which counts when
    the file has no ``output.weight`` (the tied LM head reads all of it). Quantized matrices
    run as int8 dot products (llama.cpp quantizes the activations to 8 bits), float ones as
    fp32."""
    from gguf import GGMLQuantizationType, GGUFReader

    floats = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}
    tensors = GGUFReader(path).tensors
    tied = all(t.name != "output.weight" for t in tensors)
    size = fp32 = int8 = 0
    for t in tensors:
        if len(t.shape) != 2 or (t.name == "token_embd.weight" and not tied):
            continue
        size += int(t.n_bytes)
        if t.tensor_type in floats:
            fp32 += int(t.n_elements)
        else:
            int8 += int(t.n_elements)
    return ModelCost(size, fp32, int8)


def measure_all_cores() -> Ceilings:
    """``measure()`` with every core, as the services run; the line printed as progress."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    host = measure()
    print(f"bench compare: {host.line()}", file=sys.stderr, flush=True)
    return host


def host_rooflines(readings: Sequence[Ceilings], model_dir: str, quantization: str | None,
                   levels: Sequence[int], schemes: Sequence[str | None] = (),
                   ggufs: Mapping[str, str | Path] | None = None,
                   services: Mapping[str, tuple[str, int]] | None = None,
                   base_bytes: int | None = None) -> dict[str, Any]:
    """The host's ceilings, the best of ``readings`` (at least one), and the model's roofline
    per level (for ``quantization``, from ``base_bytes`` where given: the bytes the offline
    engine says its matmul weights hold; and in ``rooflines`` for each of ``schemes`` but bf16,
    whose compute rate is not measured, for each label of ``ggufs`` from its file's own bytes,
    and for each service label of ``services``, ``(scheme, weight bytes)``, from the bytes the
    service says its matmul weights hold: a GGUF's Q4_0 weights hold fewer than its scheme's
    layout).
    ``read_gb_s_readings``: each reading's memory read, in order."""
    host = readings[0]
    for other in readings[1:]:
        host = host.best(other)

    def roofline(cost: ModelCost) -> dict[str, dict[str, Any]]:
        roof = {str(c): cost.roofline(host, c) for c in levels}
        return {"tok_s": {c: r[0] for c, r in roof.items()},
                "bound": {c: r[1] for c, r in roof.items()}}

    def cost(scheme: str | None, weight_bytes: int | None = None) -> ModelCost:
        """``scheme``'s cost, its bytes ``weight_bytes`` where an engine said them."""
        of = config_cost(model_dir, None if scheme == "fp32" else scheme)
        return replace(of, weight_bytes=weight_bytes) if weight_bytes else of
    base = roofline(cost(quantization, base_bytes))
    others = {s: roofline(cost(s)) for s in dict.fromkeys(schemes) if s and s != "bf16"}
    others.update({label: roofline(gguf_cost(path)) for label, path in (ggufs or {}).items()})
    for label, (scheme, size) in (services or {}).items():
        others[label] = roofline(cost(scheme, size))
    return {**host.as_dict(), "read_gb_s_readings": [r.read_gb_s for r in readings],
            "quantization": quantization or "fp32",
            "roofline_tok_s": base["tok_s"], "bound": base["bound"], "rooflines": others}
