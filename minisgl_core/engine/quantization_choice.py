"""``--quantization auto`` (the default): a GGUF is served in its own weight format.

A directory converted from a GGUF (store/gguf_cache.py) records in its marker the GGUF type of
each matmul weight (the 2-D tensors; the token embedding where it is also the LM head). The
type that holds most of those weights (by count of weights, not of tensors: a Q4_K_M file
mixes Q4_K and Q6_K tensors, its embedding sometimes Q8_0) picks the scheme with at least its
bits:
Q4_0/Q4_1/Q4_K and every type of 4 bits or fewer (Q2_K, Q3_K, IQ*, TQ*, MXFP4) -> int4, whose
layout is Q4_1's (groups of 32, an fp16 scale and min), so a Q4_1 weight is requantized
(nearly) exactly; Q5_0/Q5_1/Q5_K/Q6_K/Q8_0 -> int8-wo; F16/BF16/F32 -> none. An HF checkpoint
(not from a GGUF), random weights (``--load-format dummy``), an unknown type and a device the
weight-only kernels do not run on get none. ``--quantization none`` opts out, a scheme given is
kept. No torch here.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from minisgl_core.engine.config import EngineConfig
from minisgl_core.store.gguf_cache import read_marker

log = logging.getLogger(__name__)
UNQUANTIZED = ("F32", "F16", "BF16", "F64")  # served as the float weights they are
# the bits a quantized GGUF type's name states: Q4_K 4, IQ3_S 3, TQ1_0 1 (its scales aside)
_BITS = re.compile(r"(?:I?Q|TQ)(\d)_\w+")
_FP4 = ("MXFP4", "NVFP4")


@dataclass(frozen=True)
class QuantizationChoice:
    """The scheme an engine runs (None: unquantized), and why."""

    scheme: str | None
    reason: str


def scheme_of_gguf_type(name: str) -> str | None:
    """The weight-only scheme with at least the bits of GGUF type ``name`` (None: unquantized
    or unknown)."""
    if name in UNQUANTIZED:
        return None
    match = _BITS.fullmatch(name)
    bits = 4 if name in _FP4 else int(match.group(1)) if match else None
    if bits is None:
        return None
    return "int4" if bits <= 4 else "int8-wo" if bits <= 8 else None


def scheme_of_weight_types(types: dict[str, list[int]]) -> QuantizationChoice:
    """The scheme of the GGUF type holding most weights of ``types`` (type -> [tensors,
    weights], as the converted directory's marker records them)."""
    if not types:
        return QuantizationChoice(None, "the GGUF has no weight matrices recorded")
    # most weights first; ties by tensors, then by name, so the choice never depends on order
    main = max(types, key=lambda t: (types[t][1], types[t][0], t))
    tensors = sum(count[0] for count in types.values())
    weights = sum(count[1] for count in types.values())
    share = types[main][1] / weights if weights else 1.0
    others = ", ".join(f"{t}: {types[t][0]}" for t in sorted(types) if t != main)
    facts = (f"the GGUF's weight matrices are {'mostly ' if others else ''}{main}: "
             f"{types[main][0]} of {tensors} tensors, {share:.0%} of the weights"
             + (f"; {others}" if others else ""))
    return QuantizationChoice(scheme_of_gguf_type(main), facts)


def choose_quantization(model_dir: Path, load_format: str = "auto",
                        device: str = "cpu") -> QuantizationChoice:
    """The scheme ``--quantization auto`` serves ``model_dir`` in here, and why."""
    if load_format == "dummy":
        return QuantizationChoice(None, "--load-format dummy: random weights, in no GGUF type")
    marker = read_marker(model_dir)
    if marker is None:
        return QuantizationChoice(None, "not converted from a GGUF: its weights as they are")
    types = marker.get("weight_types")
    if not isinstance(types, dict):
        return QuantizationChoice(None, "the GGUF's weight types were not recorded")
    choice = scheme_of_weight_types(types)
    if choice.scheme is not None and not device.startswith("cpu"):
        return QuantizationChoice(None, f"{choice.reason} ({choice.scheme}), but the weight-only "
                                  f"kernels run on the CPU, not on {device}")
    return choice


def resolve_why(config: EngineConfig) -> tuple[EngineConfig, str]:
    """``config`` with ``quantization`` "auto" replaced by the choice and "none" by None
    (logged once), and why (shown in ``/v1/models`` meta and the dashboard)."""
    given = config.quantization
    if given == "auto":
        choice = choose_quantization(Path(config.model), config.load_format, config.device)
        shown = choice.scheme or "none"
        log.info("--quantization auto: %s (%s)", shown, choice.reason)
        return dataclasses.replace(config, quantization=choice.scheme), f"auto: {choice.reason}"
    if given == "none":
        return dataclasses.replace(config, quantization=None), "--quantization none given"
    if given is None:
        return config, "not asked for"
    return config, f"--quantization {given} given"


__all__ = ["QuantizationChoice", "choose_quantization", "resolve_why", "scheme_of_gguf_type",
           "scheme_of_weight_types"]
