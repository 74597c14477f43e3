"""Qwen2: the Llama decoder with q/k/v biases (taken from the checkpoint)."""

from __future__ import annotations

from minisgl_core.engine.models.decoder import DecoderForCausalLM


class Qwen2ForCausalLM(DecoderForCausalLM):
    """Qwen2: like Llama, with biases on the q/k/v projections."""
