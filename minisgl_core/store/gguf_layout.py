"""What every GGUF the project writes shares with llama.cpp's ``convert_hf_to_gguf.py``: the
architecture names, the hyper-parameter keys, Llama's q/k row permutation, and the byte-level BPE
tokenizer as ``gpt2`` tokens and merges with the chat template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARCHES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


def gguf_arch(cfg: dict[str, Any]) -> str:
    """The GGUF architecture of an HF ``config.json`` (ValueError for one not written)."""
    arch = ARCHES.get(cfg["architectures"][0])
    if arch is None:
        raise ValueError(f"a GGUF is written for {', '.join(ARCHES)} only, not "
                         f"{cfg['architectures'][0]}")
    return arch


def head_shape(cfg: dict[str, Any]) -> tuple[int, int, int]:
    """(query heads, key/value heads, head dim) of an HF config."""
    heads = cfg["num_attention_heads"]
    return (heads, cfg.get("num_key_value_heads") or heads,
            cfg.get("head_dim") or cfg["hidden_size"] // heads)


def permute_rotary(w: Any, heads: int) -> Any:
    """llama.cpp's rotary layout of Llama's q/k rows (its converter's ``permute``; transformers
    undoes it on load). ``w``: [heads * head_dim, ...]."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def add_hparams(writer: Any, cfg: dict[str, Any], name: str, file_type: int) -> None:
    """The model's name, shapes, rope and norm keys, as llama.cpp reads them."""
    heads, kv_heads, head_dim = head_shape(cfg)
    writer.add_name(name)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
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
    writer.add_file_type(file_type)


def add_tokenizer(writer: Any, model_dir: Path, vocab_size: int = 0) -> None:
    """``model_dir``'s tokenizer.json and tokenizer_config.json as GGUF tokenizer keys; ids up to
    ``vocab_size`` past the tokenizer's are padding tokens (an embedding with more rows)."""
    import gguf

    tok = json.loads((model_dir / "tokenizer.json").read_text())
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    special = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab.update(special)
    size = max(max(vocab.values()) + 1, vocab_size)
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


__all__ = ["ARCHES", "add_hparams", "add_tokenizer", "gguf_arch", "head_shape", "permute_rotary"]
