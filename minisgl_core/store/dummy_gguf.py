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

from minisgl_core.store.random_weights import RandomCheckpoint, tokenizer_size

ARCHES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


def _permute(w: Any, heads: int) -> Any:
    """llama.cpp's rotary layout of Llama's q/k rows (its converter's ``permute``)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


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


def _tokenizer(writer: Any, model_dir: Path, vocab_size: int) -> None:
    import gguf

    tok = json.loads((model_dir / "tokenizer.json").read_text())
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab.update(special)
    size = max(max(vocab.values()) + 1, vocab_size)
    # the embedding has the config's rows: the ids past the tokenizer's are padding tokens
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [gguf.TokenType.UNUSED] * size
    for text, index in vocab.items():
        tokens[index] = text
        types[index] = gguf.TokenType.CONTROL if text in special else gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (("eos_token", writer.add_eos_token_id), ("pad_token", writer.add_pad_token_id),
                     ("bos_token", writer.add_bos_token_id)):
        if config.get(key) in special:
            add(special[config[key]])
    writer.add_add_bos_token(False)
    if config.get("chat_template"):
        writer.add_chat_template(config["chat_template"])


def write_dummy_gguf(model_dir: Path, out: Path, seed: int = 0) -> Path:
    """Write the random weights of ``model_dir`` (its config.json, the ``seed`` it was written
    with) and its tokenizer as the F16 GGUF ``out``; return ``out``."""
    import gguf
    import numpy as np
    import torch

    cfg = json.loads((model_dir / "config.json").read_text())
    arch = ARCHES.get(cfg["architectures"][0])
    if arch is None:
        raise ValueError(f"a GGUF is written for {', '.join(ARCHES)} only, not "
                         f"{cfg['architectures'][0]}")
    ckpt = RandomCheckpoint(cfg, seed=seed, tokens=tokenizer_size(model_dir))
    heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name(model_dir.name)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(hidden)
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(cfg["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _tokenizer(writer, model_dir, cfg["vocab_size"])
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
            data = _permute(data, heads if "attn_q" in name else kv_heads)
        data = data.to(torch.float16 if data.ndim == 2 else torch.float32).contiguous()
        writer.write_tensor_data(data.numpy())
    writer.close()
    return out


__all__ = ["ARCHES", "llama3_rope_factors", "write_dummy_gguf"]
