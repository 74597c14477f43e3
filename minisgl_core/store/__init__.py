"""The model store: where models come from before the engine loads them.

``paths`` (minisgl's and the Hugging Face cache directories), ``naming`` (the name a model
directory is served under), ``default_model`` (the embedded SmolLM2 GGUF), ``gguf_cache`` (GGUF
files converted once into HF-format directories, cached by content), ``convert`` (the converter
itself, run in a child process) and ``hub`` (Hugging Face Hub ids through ``huggingface_hub``).
Nothing here imports torch at module level; the engine is handed the directories this finds.
"""
