"""What a model's config.json says that minisgl cannot serve, before any weight is read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def quantized_refusal(config: Mapping[str, Any]) -> str | None:
    """Why a pre-quantized checkpoint (GPTQ, AWQ, FP8, bitsandbytes...) is refused, or None:
    minisgl loads float weights (fp32, bf16, fp16) and quantizes them itself."""
    quant = config.get("quantization_config")
    if not quant:
        return None
    method = quant.get("quant_method", "unknown") if isinstance(quant, Mapping) else "unknown"
    return (f"is a pre-quantized checkpoint ({method}); minisgl loads float weights (fp32, "
            f"bf16, fp16) and quantizes them itself (--quantization int8)")


__all__ = ["quantized_refusal"]
