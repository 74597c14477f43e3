"""The model architectures the engine ships (Llama, Qwen2, Qwen3, Gemma 3).

They are registered like any plugin's, by ``default_plugins/models.py`` through the
``minisgl_register_models`` hook; ``minisgl_core.plugin.model_lookup.model_class`` picks the
class of a model directory from that one registry, and the engine is handed the class.
"""
