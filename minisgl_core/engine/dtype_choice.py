"""``--dtype auto``: bf16 where this host's best bf16 matmul measures faster than its best fp32 one.

On a host with AVX512-BF16/AMX oneDNN's packed bf16 kernel was 1.8-3x faster than fp32's best on
the default model's gate|up layer [3072, 576] at 1-32 rows; on an AVX2-only host bf16 is emulated,
hundreds of times slower, and never chosen (it is not even timed). The choice is the kernel
choice (kernel_choice.py) run for both dtypes on the model's widest layer, so it is cached with
it: the same for a given cache, measured again only where that is. Weight-only engines (int8-wo,
int4) are timed the same way on their own kernels: int4 against bf16 activations has kernels of
its own (AVX512-BF16's dot product, AMX on dequantized tiles from 32 rows) and won 1.1-1.8x at 8
and 32 rows on the AMX host, while int8-wo converts bf16 inputs to fp32 and so loses a little.
An int8 (W8A8) engine runs in fp32: its kernels take fp32 activations.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from minisgl_core.engine.config import EngineConfig, ModelConfig
from minisgl_core.engine.linear import BUCKETS, bf16_fast

log = logging.getLogger(__name__)
DECODE = (0, 1, 2)  # the buckets (1, 8, 32 rows) compared: decode steps, where the time goes


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype an ``auto`` engine runs in, and why."""

    dtype: str  # "float32" or "bfloat16"
    reason: str


def choose_dtype(cfg: ModelConfig, device: torch.device, quantization: str | None = None,
                 cache: Path | None = None, budget_s: float | None = None) -> DtypeChoice:
    """fp32 or bf16 for this model here, by timing the model's gate|up layer in both."""
    from minisgl_core.engine import kernel_choice

    if quantization == "int8":  # its kernels take fp32 activations
        return DtypeChoice("float32", f"--quantization {quantization} runs in fp32")
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return DtypeChoice("bfloat16", "CUDA device with bf16")
        return DtypeChoice("float32", "CUDA device without bf16")
    if device.type != "cpu":
        return DtypeChoice("float32", f"{device.type} device: fp32")
    if not bf16_fast():
        return DtypeChoice("float32", "no AVX512-BF16/AMX on this CPU: bf16 would be emulated")
    shapes = {"gate_up": (2 * cfg.intermediate_size, cfg.hidden_size)}
    times: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):  # the weight-only kernels timed as they run
        choice = kernel_choice.choose(shapes, device, dtype, quantization, cache=cache,
                                      budget_s=budget_s or kernel_choice.BUDGET_S)
        seconds = kernel_choice.seconds_of(choice)
        if seconds is None:
            return DtypeChoice("float32", f"bf16 not measured ({choice.source})")
        times[str(dtype)] = sum(seconds["gate_up"][b] for b in DECODE)
    fp32, bf16 = times["torch.float32"], times["torch.bfloat16"]
    rows = "/".join(str(BUCKETS[b]) for b in DECODE)
    layer = "gate|up layer" if quantization is None else f"{quantization} gate|up layer"
    why = (f"{layer} at {rows} rows: bf16 {bf16 * 1e3:.2f} ms, fp32 {fp32 * 1e3:.2f} ms "
           "in all")
    return DtypeChoice("bfloat16" if bf16 < fp32 else "float32", why)


def resolve(config: EngineConfig) -> EngineConfig:
    """``config`` with ``dtype="auto"`` replaced by the measured choice (logged once)."""
    return resolve_why(config)[0]


def resolve_why(config: EngineConfig) -> tuple[EngineConfig, str]:
    """``resolve``, and why that dtype (shown in ``/v1/models`` meta and the dashboard)."""
    if config.dtype != "auto":
        return config, f"--dtype {config.dtype} given"
    cfg = ModelConfig.from_dir(Path(config.model))
    if config.num_threads is not None:  # timed with the threads the engine will run
        torch.set_num_threads(config.num_threads)
    choice = choose_dtype(cfg, torch.device(config.device), config.quantization)
    log.info("--dtype auto: %s (%s)", choice.dtype, choice.reason)
    return dataclasses.replace(config, dtype=choice.dtype), f"auto: {choice.reason}"
