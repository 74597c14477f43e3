"""The quantization schemes (``--quantization``), listed once: the launch config, the engine
config, the CLI and the kernels all read this tuple. No torch here."""

from __future__ import annotations

# "int8": int8 weights and per-token int8 inputs (matmul/w8a8.py); "int8-wo", "int4": weights
# only, inputs in the engine's dtype (matmul/weight_only.py)
QUANTIZATIONS = ("int8", "int8-wo", "int4")
WEIGHT_ONLY = ("int8-wo", "int4")
