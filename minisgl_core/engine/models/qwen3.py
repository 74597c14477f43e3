"""Qwen3: the Llama decoder with per-head RMSNorm on q and k before RoPE."""

from __future__ import annotations

from typing import ClassVar

from minisgl_core.engine.models.decoder import DecoderForCausalLM


class Qwen3ForCausalLM(DecoderForCausalLM):
    """Qwen3: q_norm / k_norm over each head's dimension, no q/k/v biases."""

    qk_norm: ClassVar[bool] = True
