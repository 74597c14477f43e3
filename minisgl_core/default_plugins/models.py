"""Default plugin: the model architectures the engine ships (Llama, Qwen2, Qwen3, Gemma 3)."""

from __future__ import annotations

from minisgl_core.plugin.hookspecs import Register, hookimpl

# Lazy "module:attr" strings: registering imports nothing (torch stays off the --help path).
# This is the only table of the built-in architectures.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "minisgl_core.engine.models.llama:LlamaForCausalLM",
    "Qwen2ForCausalLM": "minisgl_core.engine.models.qwen2:Qwen2ForCausalLM",
    "Qwen3ForCausalLM": "minisgl_core.engine.models.qwen3:Qwen3ForCausalLM",
    "Gemma3ForCausalLM": "minisgl_core.engine.models.gemma3:Gemma3ForCausalLM",
}


@hookimpl
def minisgl_register_models(register: Register) -> None:
    """Register each built-in architecture under its Hugging Face ``architectures[0]`` name."""
    for name, target in ARCHITECTURES.items():
        register(name, target)
