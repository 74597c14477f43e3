"""``--dtype auto``: bf16 where this host's bf16 matmuls measure faster than its fp32 ones.

On a host with AVX512-BF16/AMX oneDNN's packed bf16 kernel was 1.8-3x faster than fp32's best
on the default model's gate|up layer [3072, 576] at 1-32 rows; on an AVX2-only host bf16 is
emulated, hundreds of times slower, and never chosen (it is not even timed). The choice is the
kernel choice (kernels/matmul/choice.py) run for both dtypes on every matmul shape of the model,
so it is cached with it (the engine's own choice then reads the same file): the same for a given
cache, measured again only where that is. Weight-only engines (int8-wo, int4) are timed the same
way on their own kernels. An int8 (W8A8) engine runs in fp32: its kernels take fp32 activations.

A step's matmul time per row bucket is its layers' chosen kernels' times, each layer counted as
often as the model has it, plus the LM head (a layer timed on its first rows scaled to its
width); every bucket then counts alike, by its slowdown
against the faster dtype there (as the kernel choice weighs layouts), and fp32 must be more than
BF16_TIE ahead: bf16 halves the bytes the matmul timings do not see (the KV cache, every
activation). Both dtypes are timed in the same process: one cached and the other timed now are
timed again together. The whole model matters:
with the default model's int4 panels the gate|up layer alone times within a few percent in either
dtype at 1-32 rows (both round their inputs to int8), so a noisy host picked either, while the
LM head (int8-wo on AMX's tile multiply: bf16 only) and prefill's 128 and 512 rows (a GEMM on
dequantized tiles: bf16 only) are 1.3-5x faster in bf16; with fp32 the engine's step at 32 rows
took 1.6x and long prompts 1.8x as long. A model too small to time (MIN_WEIGHTS in its gate|up
layer) keeps fp32 on every host; decode timings too far apart to be true (MAX_RATIO) are taken
once more, and the log line says what was timed and whether it was cached.
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
DECODE = (0, 1, 2)  # the buckets of decode steps (1, 8, 32 rows), checked for plausibility
# A gate|up layer of fewer weights (the default model's has 1.8M, test models thousands) is timed
# in microseconds of dispatch and thread wake-up, not in arithmetic: either dtype may "win" by
# noise, so it keeps fp32, the same on every host.
MIN_WEIGHTS = 1 << 20
# bf16 and fp32 decode sums further apart than this were timed beside other work (AMX's bf16 was
# 1.8-3x fp32 at 1-32 rows, AVX512-BF16's about 1.5x; a 2-core host under load measured 21x):
# timed again once, bypassing the cache
MAX_RATIO = 8.0
# fp32 only where bf16's matmuls are more than this slower: bf16 halves the bytes of the KV cache
# and of every activation, which the matmul timings do not see. Where both dtypes run the same
# kernels (the int4 panels round either to int8) their timings differ by noise alone.
BF16_TIE = 1.05


# a step's matmul seconds per bucket, "measured" or "cached", and the chosen kernels' names
# where each rounds its inputs to int8 (else None)
Timed = tuple[tuple[float, ...], str, tuple[str, ...] | None]


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype an ``auto`` engine runs in, and why."""

    dtype: str  # "float32" or "bfloat16"
    reason: str


def choose_dtype(cfg: ModelConfig, device: torch.device, quantization: str | None = None,
                 cache: Path | None = None, budget_s: float | None = None) -> DtypeChoice:
    """fp32 or bf16 for this model here, by timing the model's matmuls in both."""
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
    what = "matmuls" if quantization is None else f"{quantization} matmuls"
    if out * inp < MIN_WEIGHTS:
        return DtypeChoice("float32", f"gate|up layer [{out}x{inp}] too small to time "
                           "(microseconds of dispatch either way): fp32, which rounds least")
    shapes, shared = model_shapes(cfg), {"lm_head"} if cfg.tie_word_embeddings else set()
    budget = budget_s or kernel_choice.BUDGET_S
    timed = _time_both(cfg, shapes, shared, device, quantization, cache, budget, remeasure=False)
    # timed beside a burst of other work, or one dtype now and the other at an earlier start:
    # on a 2-core Zen 4 the dtype timed now came out 9-15% ahead of the cached one, either way
    # round, with the same kernels in both
    if timed is not None and (_implausible(timed) or timed["float32"][1] != timed["bfloat16"][1]):
        timed = _time_both(cfg, shapes, shared, device, quantization, cache, budget,
                           remeasure=True)
    if timed is None:
        return DtypeChoice("float32", "bf16 not measured (the time budget ran out)")
    (fp32, fp32_how, fp32_int8), (bf16, bf16_how, bf16_int8) = (timed["float32"],
                                                                timed["bfloat16"])
    fastest = [min(a, b) for a, b in zip(fp32, bf16, strict=True)]
    slowdown = {name: sum(t / f for t, f in zip(ts, fastest, strict=True)) / len(ts)
                for name, ts in (("float32", fp32), ("bfloat16", bf16))}
    trimmed = any(kernel_choice.timed_width(o, i) < o for o, i in shapes.values())
    decode = "/".join(str(BUCKETS[b]) for b in DECODE)
    why = (f"the model's {what} ({cfg.num_layers} layers and the LM head"
           f"{', the widest on their first rows' if trimmed else ''}) at "
           f"{'/'.join(map(str, BUCKETS))} rows, best of {kernel_choice.REPEATS} runs after a "
           f"warm-up, on average against the faster dtype: bf16 {slowdown['bfloat16']:.2f}x "
           f"({bf16_how}), fp32 {slowdown['float32']:.2f}x ({fp32_how}); a step's matmuls at "
           f"{decode} rows: bf16 {_decode_ms(bf16)} ms, fp32 {_decode_ms(fp32)} ms")
    if _implausible(timed):
        why += f"; still over {MAX_RATIO:.0f}x apart when timed again: the host was busy"
    if fp32_int8 is not None and fp32_int8 == bf16_int8:
        return DtypeChoice("bfloat16", "the same kernels in both dtypes, each rounding its "
                           "inputs to int8 (the same arithmetic: timings apart by noise alone), "
                           "and bf16 halves the KV cache's and activations' bytes; " + why)
    fp32_ahead = slowdown["bfloat16"] > BF16_TIE * slowdown["float32"]
    return DtypeChoice("float32" if fp32_ahead else "bfloat16", why)


def model_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """``(out, in)`` of the model's matmul weights by role, unsharded: the decoder's
    ``linear_shapes`` without tensor parallelism, so the engine's choice reads this one's cache."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {"qkv": (q + 2 * kv, cfg.hidden_size), "o": (cfg.hidden_size, q),
            "gate_up": (2 * cfg.intermediate_size, cfg.hidden_size),
            "down": (cfg.hidden_size, cfg.intermediate_size),
            "lm_head": (cfg.vocab_size, cfg.hidden_size)}


def _time_both(cfg: ModelConfig, shapes: dict[str, tuple[int, int]], shared: set[str],
               device: torch.device, quantization: str | None, cache: Path | None,
               budget_s: float, remeasure: bool,
               ) -> dict[str, Timed] | None:
    """dtype -> (a step's matmul seconds per bucket, measured or cached, the chosen kernels'
    names where every one rounds its inputs to int8); None where the budget ran out. Each dtype
    gets the same budget and its own warm-up (kernel_choice)."""
    out: dict[str, Timed] = {}
    for dtype in (torch.float32, torch.bfloat16):  # the weight-only kernels timed as they run
        choice = kernel_choice.choose(shapes, device, dtype, quantization, shared=shared,
                                      cache=cache, budget_s=budget_s, remeasure=remeasure,
                                      copy_weights=kernel_choice.layer_weights(shapes,
                                                                               cfg.num_layers))
        seconds = kernel_choice.seconds_of(choice)
        if seconds is None:
            return None
        # a layer timed on its first rows (kernel_choice.timed_width) takes its whole width's
        # share: the time grows linearly with the width there
        weight = {role: (1 if role == "lm_head" else cfg.num_layers)
                  * out / kernel_choice.timed_width(out, inp)
                  for role, (out, inp) in shapes.items()}
        per_step = tuple(sum(ts[b] * weight[role] for role, ts in seconds.items())
                         for b in range(len(BUCKETS)))
        how = "cached" if choice.source.startswith("cached") else "measured"
        chosen = [k for ks in choice.kernels.values() for k in ks]
        int8 = tuple(k.name for k in chosen) if chosen and all(
            k.rounds_inputs or k.unrounded_twin_of for k in chosen) else None
        out[str(dtype).removeprefix("torch.")] = (per_step, how, int8)
    return out


def _decode_s(seconds: tuple[float, ...]) -> float:
    return sum(seconds[b] for b in DECODE)


def _decode_ms(seconds: tuple[float, ...]) -> str:
    return "/".join(f"{seconds[b] * 1e3:.1f}" for b in DECODE)


def _implausible(timed: dict[str, Timed]) -> bool:
    """Whether the two dtypes' decode times are further apart than any kernel pair measured so
    far allows."""
    a, b = _decode_s(timed["float32"][0]), _decode_s(timed["bfloat16"][0])
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
