"""The quantization schemes (``--quantization``) and KV cache dtypes (``--kv-cache-dtype``),
listed once: the launch config, the engine config, the CLI and the kernels all read these
tuples. No torch here."""

from __future__ import annotations

# "int8": int8 weights and per-token int8 inputs (matmul/w8a8.py); "int8-wo", "int4": weights
# only, inputs in the engine's dtype (matmul/weight_only.py)
QUANTIZATIONS = ("int8", "int8-wo", "int4")
WEIGHT_ONLY = ("int8-wo", "int4")
# what --quantization takes: "auto" (the default) serves a GGUF in the scheme of its own weight
# type (engine/quantization_choice.py) and anything else unquantized; "none" never quantizes
QUANTIZATION_OPTIONS = ("auto", "none", *QUANTIZATIONS)
# "auto": KV pages in the model's dtype; "int8": int8 values with an fp16 scale per token and
# head (kv_int8.py). vLLM's flag and names
KV_CACHE_DTYPES = ("auto", "int8")
