"""``--dtype auto``: bf16 where this host's best bf16 matmul measures faster than its best fp32 one.

On a host with AVX512-BF16/AMX oneDNN's packed bf16 kernel was 1.8-3x faster than fp32's best
on the default model's gate|up layer [3072, 576] at 1-32 rows; on an AVX2-only host bf16 is
emulated, hundreds of times slower, and never chosen (it is not even timed). The choice is the
kernel choice (kernels/matmul/choice.py) run for both dtypes on the model's widest layer, so it
is cached with it: the same for a given cache, measured again only where that is. Weight-only
engines (int8-wo, int4) are timed the same way on their own kernels: int4 against bf16
activations has kernels of its own (AVX512-BF16's dot product, AMX on dequantized tiles from 32
rows) and won 1.1-1.8x at 8 and 32 rows on the AMX host, while int8-wo converts bf16 inputs to
fp32 and so loses a little. An int8 (W8A8) engine runs in fp32: its kernels take fp32
activations. A layer too small to time (MIN_WEIGHTS) keeps fp32 on every host; timings too far
apart to be true (MAX_RATIO) are taken once more, and the log line names the layer, the kernels
and whether they were cached.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from minisgl_core.engine.config import EngineConfig, ModelConfig
from minisgl_core.kernels import BUCKETS, bf16_fast
from minisgl_core.kernels import choice as kernel_choice

log = logging.getLogger(__name__)
DECODE = (0, 1, 2)  # the buckets (1, 8, 32 rows) compared: decode steps, where the time goes
# A gate|up layer of fewer weights (the default model's has 1.8M, test models thousands) is timed
# in microseconds of dispatch and thread wake-up, not in arithmetic: either dtype may "win" by
# noise, so it keeps fp32, the same on every host.
MIN_WEIGHTS = 1 << 20
# bf16 and fp32 decode sums further apart than this were timed beside other work (AMX's bf16 was
# 1.8-3x fp32 at 1-32 rows, AVX512-BF16's about 1.5x; a 2-core host under load measured 21x):
# timed again once, bypassing the cache
MAX_RATIO = 8.0


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype an ``auto`` engine runs in, and why."""

    dtype: str  # "float32" or "bfloat16"
    reason: str


def choose_dtype(cfg: ModelConfig, device: torch.device, quantization: str | None = None,
                 cache: Path | None = None, budget_s: float | None = None) -> DtypeChoice:
    """fp32 or bf16 for this model here, by timing the model's gate|up layer in both."""
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
    out, inp = 2 * cfg.intermediate_size, cfg.hidden_size
    layer = "gate|up layer" if quantization is None else f"{quantization} gate|up layer"
    if out * inp < MIN_WEIGHTS:
        return DtypeChoice("float32", f"{layer} [{out}x{inp}] too small to time (microseconds "
                           "of dispatch either way): fp32, which rounds least")
    timed = _time_both({"gate_up": (out, inp)}, device, quantization, cache,
                       budget_s or kernel_choice.BUDGET_S, remeasure=False)
    if timed is not None and _implausible(timed):  # timed beside a burst of other work
        timed = _time_both({"gate_up": (out, inp)}, device, quantization, cache,
                           budget_s or kernel_choice.BUDGET_S, remeasure=True)
    if timed is None:
        return DtypeChoice("float32", "bf16 not measured (the time budget ran out)")
    (fp32, fp32_how), (bf16, bf16_how) = timed["float32"], timed["bfloat16"]
    rows = "/".join(str(BUCKETS[b]) for b in DECODE)
    width = kernel_choice.timed_width(out, inp)
    trimmed = f" (its first {width} rows)" if width < out else ""
    why = (f"{layer} [{out}x{inp}]{trimmed} at {rows} rows, best of {kernel_choice.REPEATS} "
           f"runs after a warm-up: bf16 {bf16 * 1e3:.2f} ms ({bf16_how}), fp32 {fp32 * 1e3:.2f} ms "
           f"({fp32_how}) in all")
    if _implausible(timed):
        why += f"; still over {MAX_RATIO:.0f}x apart when timed again: the host was busy"
    return DtypeChoice("bfloat16" if bf16 < fp32 else "float32", why)


def _time_both(shapes: dict[str, tuple[int, int]], device: torch.device,
               quantization: str | None, cache: Path | None, budget_s: float,
               remeasure: bool) -> dict[str, tuple[float, str]] | None:
    """dtype -> (seconds over the decode buckets, the kernels that ran them); None where the
    budget ran out. Each dtype gets the same budget and its own warm-up (kernel_choice)."""
    out: dict[str, tuple[float, str]] = {}
    for dtype in (torch.float32, torch.bfloat16):  # the weight-only kernels timed as they run
        choice = kernel_choice.choose(shapes, device, dtype, quantization, cache=cache,
                                      budget_s=budget_s, remeasure=remeasure)
        seconds = kernel_choice.seconds_of(choice)
        if seconds is None:
            return None
        kernels = "/".join(dict.fromkeys(k.name for k in choice.kernels["gate_up"][:3]))
        how = "cached" if choice.source.startswith("cached") else "measured"
        out[str(dtype).removeprefix("torch.")] = (
            sum(seconds["gate_up"][b] for b in DECODE), f"{kernels}, {how}")
    return out


def _implausible(timed: dict[str, tuple[float, str]]) -> bool:
    """Whether the two dtypes are further apart than any kernel pair measured so far allows."""
    a, b = timed["float32"][0], timed["bfloat16"][0]
    return max(a, b) > MAX_RATIO * min(a, b)


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
