"""Llama (SmolLM2 is one): the plain decoder."""

from __future__ import annotations

from minisgl_core.engine.models.decoder import DecoderForCausalLM


class LlamaForCausalLM(DecoderForCausalLM):
    """Llama: RMSNorm, RoPE, GQA, SwiGLU; biases only when attention_bias/mlp_bias say so."""
