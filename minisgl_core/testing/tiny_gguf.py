"""Write a GGUF file from an HF-format model directory (the tiny models), as llama.cpp's
``convert_hf_to_gguf.py`` lays one out: its metadata keys, tensor names and q/k permutation
(Llama), the byte-level BPE tokenizer as ``gpt2`` tokens and merges, the chat template.

``qtype`` is ``F32`` (exact), ``F16``, ``Q8_0``, ``Q4_0`` or ``Q4_1`` (matrices only; norms stay
F32, as llama.cpp keeps them), so tests can compare a GGUF-served model with its original at a
known tolerance, and see which scheme ``--quantization auto`` serves each type in.
"""

from __future__ import annotations

import json
from pathlib import Path

from minisgl_core.store.gguf_layout import (
    add_hparams,
    add_tokenizer,
    gguf_arch,
    head_shape,
    permute_rotary,
)


def write_gguf(model_dir: Path, out: Path, qtype: str = "F32") -> Path:
    """Write ``model_dir`` (a tiny Llama / Qwen2 / Qwen3) as the GGUF file ``out``."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    cfg = json.loads((model_dir / "config.json").read_text())
    arch = gguf_arch(cfg)
    quant = getattr(gguf.GGMLQuantizationType, qtype)
    heads, kv_heads, _ = head_shape(cfg)
    writer = gguf.GGUFWriter(str(out), arch)
    file_type = gguf.LlamaFileType.ALL_F32 if qtype == "F32" else \
        gguf.LlamaFileType[f"MOSTLY_{qtype}"]
    add_hparams(writer, cfg, model_dir.name, int(file_type))
    add_tokenizer(writer, model_dir)
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()),
                                     cfg["num_hidden_layers"])
    for hf_name, data in sorted(load_file(str(model_dir / "model.safetensors")).items()):
        base, _, suffix = hf_name.rpartition(".")
        name = f"{names.get_name(base)}.{suffix}"
        data = data.astype(np.float32)
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            data = permute_rotary(data, heads if "attn_q" in name else kv_heads)
        if data.ndim == 2 and qtype != "F32":
            writer.add_tensor(name, gguf.quants.quantize(data, quant), raw_dtype=quant)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


__all__ = ["write_gguf"]
