"""Write a GGUF file from an HF-format model directory (the tiny models), as llama.cpp's
``convert_hf_to_gguf.py`` lays one out: its metadata keys, tensor names and q/k permutation
(Llama), the byte-level BPE tokenizer as ``gpt2`` tokens and merges, the chat template.

``qtype`` is ``F32`` (exact), ``F16`` or ``Q8_0`` (matrices only; norms stay F32, as llama.cpp
keeps them), so tests can compare a GGUF-served model with its original at a known tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARCHES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


def _permute(w: Any, heads: int) -> Any:
    """llama.cpp's rotary layout for Llama's q/k rows (transformers undoes it on load)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def _tokenizer(writer: Any, model_dir: Path) -> None:
    import gguf

    tok = json.loads((model_dir / "tokenizer.json").read_text())
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab.update(special)
    tokens = [""] * (max(vocab.values()) + 1)
    for text, index in vocab.items():
        tokens[index] = text
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
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


def write_gguf(model_dir: Path, out: Path, qtype: str = "F32") -> Path:
    """Write ``model_dir`` (a tiny Llama / Qwen2 / Qwen3) as the GGUF file ``out``."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    cfg = json.loads((model_dir / "config.json").read_text())
    arch = ARCHES[cfg["architectures"][0]]
    quant = getattr(gguf.GGMLQuantizationType, qtype)
    writer = gguf.GGUFWriter(str(out), arch)
    writer.add_name(model_dir.name)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(cfg["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_vocab_size(cfg["vocab_size"])
    writer.add_file_type({"F32": 0, "F16": 1, "Q8_0": 7}[qtype])
    _tokenizer(writer, model_dir)
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()),
                                     cfg["num_hidden_layers"])
    for hf_name, data in sorted(load_file(str(model_dir / "model.safetensors")).items()):
        base, _, suffix = hf_name.rpartition(".")
        name = f"{names.get_name(base)}.{suffix}"
        data = data.astype(np.float32)
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            data = _permute(data, heads if "attn_q" in name else kv_heads)
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
