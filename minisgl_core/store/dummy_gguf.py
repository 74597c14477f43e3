"""Write a random model directory's weights as an F16 GGUF, laid out as llama.cpp's
``convert_hf_to_gguf.py`` does (metadata keys, tensor names, Llama's q/k permutation, a Llama 3
``rope_freqs`` tensor, the byte-level BPE tokenizer padded to the config's vocabulary).

The tensors come from ``random_weights.RandomCheckpoint`` one at a time, so the GGUF holds the very
weights of the directory's safetensors (as f16; norms as f32, as llama.cpp keeps them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from minisgl_core.store.gguf_layout import (
    add_hparams,
    add_tokenizer,
    gguf_arch,
    head_shape,
    permute_rotary,
)
from minisgl_core.store.random_weights import RandomCheckpoint, tokenizer_size


def llama3_rope_factors(cfg: dict[str, Any], head_dim: int) -> list[float] | None:
    """The per-frequency divisors of Llama 3's rope scaling (None without it)."""
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) != "llama3":
        return None
    factor, low, high = (float(scaling[k]) for k in ("factor", "low_freq_factor",
                                                       "high_freq_factor"))
    old = float(scaling["original_max_position_embeddings"])
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * float(cfg["rope_theta"]) ** (i / head_dim)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def write_dummy_gguf(model_dir: Path, out: Path, seed: int = 0) -> Path:
    """Write the random weights of ``model_dir`` (its config.json, the ``seed`` it was written
    with) and its tokenizer as the F16 GGUF ``out``; return ``out``."""
    import gguf
    import numpy as np
    import torch

    cfg = json.loads((model_dir / "config.json").read_text())
    arch = gguf_arch(cfg)
    ckpt = RandomCheckpoint(cfg, seed=seed, tokens=tokenizer_size(model_dir))
    heads, kv_heads, head_dim = head_shape(cfg)
    writer = gguf.GGUFWriter(str(out), arch)
    add_hparams(writer, cfg, model_dir.name, gguf.LlamaFileType.MOSTLY_F16)
    add_tokenizer(writer, model_dir, cfg["vocab_size"])
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()),
                                     cfg["num_hidden_layers"])
    rope_factors = llama3_rope_factors(cfg, head_dim)
    planned: list[tuple[str, str | None]] = []  # (GGUF name, HF name; None: rope_freqs)
    for hf_name in ckpt.names():
        base, _, suffix = hf_name.rpartition(".")
        name = f"{names.get_name(base)}.{suffix}"
        shape = ckpt.shape(hf_name)
        dtype = np.dtype(np.float16 if len(shape) == 2 else np.float32)
        writer.add_tensor_info(name, shape, dtype, math.prod(shape) * dtype.itemsize)
        planned.append((name, hf_name))
    if rope_factors is not None:
        name = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"
        writer.add_tensor_info(name, (len(rope_factors),), np.dtype(np.float32),
                               4 * len(rope_factors))
        planned.append((name, None))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, hf_name in planned:
        if hf_name is None:
            writer.write_tensor_data(np.asarray(rope_factors, dtype=np.float32))
            continue
        data = ckpt.get(hf_name)
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            data = permute_rotary(data, heads if "attn_q" in name else kv_heads)
        data = data.to(torch.float16 if data.ndim == 2 else torch.float32).contiguous()
        writer.write_tensor_data(data.numpy())
    writer.close()
    return out


__all__ = ["llama3_rope_factors", "write_dummy_gguf"]
