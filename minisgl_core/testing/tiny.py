"""Build a tiny random Llama / Qwen2 / Qwen3 / Gemma 3 model directory in code (no download, < 2 s).

The directory is a complete HF-format model: config.json, model.safetensors,
generation_config.json and a byte-level BPE tokenizer (trained here on a few lines, emoji and
Chinese included, so multi-byte characters span several tokens) with a ChatML chat template.
transformers can load it too, which is what the equality tests compare against.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARCHES = ("llama", "qwen2", "qwen3", "gemma3")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Qwen3's thinking switch: with enable_thinking false the template writes an empty block
THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE + (
    "{% if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}"
)
TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! This is a tiny tokenizer for tests, with numbers 0123456789.",
    "The capital of France is Paris. The capital of Japan is Tokyo.",
    "Streaming text must never split a character: café, naïve, über, 😀 🚀 🎉 👍🏽.",
    "你好，世界！今天天气很好。我们在测试分词器。",
    "def add(a, b):\n    return a + b  # code, tabs\tand newlines\n",
    "Once upon a time there was a small model that answered every question.",
]


def _tokenizer_files(path: Path, vocab_size: int, chat_template: str = CHAT_TEMPLATE) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TRAINING_TEXT * 4, trainer)
    tok.save(str(path / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": chat_template,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return int(tok.get_vocab_size())


def _config(arch: str, vocab: int, eos: int, pad: int) -> dict[str, Any]:
    base: dict[str, Any] = {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": vocab, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "hidden_act": "silu", "bos_token_id": pad, "eos_token_id": eos,
        "pad_token_id": pad, "torch_dtype": "float32", "initializer_range": 0.02,
    }
    if arch == "llama":
        return {**base, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False}
    if arch == "qwen2":
        return {**base, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                "tie_word_embeddings": False, "use_sliding_window": False,
                "rope_theta": 1000000.0}
    if arch == "qwen3":  # head_dim deliberately != hidden / heads, as in real Qwen3 models
        return {**base, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                "head_dim": 32, "tie_word_embeddings": True, "attention_bias": False,
                "use_sliding_window": False, "rope_theta": 1000000.0}
    if arch == "gemma3":  # 3 layers: two sliding (a window of 8 tokens), then one global
        return {**base, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                "head_dim": 32, "num_hidden_layers": 3, "tie_word_embeddings": True,
                "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 24,
                "sliding_window": 8, "attention_bias": False,
                "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                "rope_parameters": {
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                    "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
                "final_logit_softcapping": None, "attn_logit_softcapping": None}
    raise ValueError(f"unknown tiny arch {arch!r} (choose from {', '.join(ARCHES)})")


def _weights(cfg: dict[str, Any], arch: str, seed: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden, inter, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    hq, hkv, vocab = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]

    def rand(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    def norm(n: int) -> torch.Tensor:  # Gemma's norms scale by 1 + weight: centred on 0
        return (0.0 if arch == "gemma3" else 1.0) + rand(n, std=0.1)

    # large-ish scales give peaked logits, so greedy ties (and flaky comparisons) are unlikely
    w: dict[str, torch.Tensor] = {"model.embed_tokens.weight": rand(vocab, hidden, std=0.5),
                                  "model.norm.weight": norm(hidden)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rand(vocab, hidden, std=0.5)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(hidden)
        w[p + "post_attention_layernorm.weight"] = norm(hidden)
        for name, rows in (("q", hq * d), ("k", hkv * d), ("v", hkv * d)):
            w[p + f"self_attn.{name}_proj.weight"] = rand(rows, hidden, std=hidden ** -0.5)
            if arch == "qwen2":
                w[p + f"self_attn.{name}_proj.bias"] = rand(rows, std=0.2)
        w[p + "self_attn.o_proj.weight"] = rand(hidden, hq * d, std=(hq * d) ** -0.5)
        if arch in ("qwen3", "gemma3"):
            w[p + "self_attn.q_norm.weight"] = norm(d)
            w[p + "self_attn.k_norm.weight"] = norm(d)
        if arch == "gemma3":
            w[p + "pre_feedforward_layernorm.weight"] = norm(hidden)
            w[p + "post_feedforward_layernorm.weight"] = norm(hidden)
        w[p + "mlp.gate_proj.weight"] = rand(inter, hidden, std=hidden ** -0.5)
        w[p + "mlp.up_proj.weight"] = rand(inter, hidden, std=hidden ** -0.5)
        w[p + "mlp.down_proj.weight"] = rand(hidden, inter, std=inter ** -0.5)
    return w


def make_tiny_model(path: Path, arch: str = "llama", seed: int = 0,
                    chat_template: str = CHAT_TEMPLATE) -> Path:
    """Write a tiny random ``arch`` model (2 layers, hidden 64) into ``path``; return ``path``."""
    from safetensors.torch import save_file

    if arch not in ARCHES:
        raise ValueError(f"unknown tiny arch {arch!r} (choose from {', '.join(ARCHES)})")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = _tokenizer_files(path, vocab_size=384, chat_template=chat_template)
    pad, eos = SPECIAL_TOKENS.index("<|endoftext|>"), SPECIAL_TOKENS.index("<|im_end|>")
    cfg = _config(arch, vocab, eos, pad)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    gen = {"bos_token_id": pad, "eos_token_id": [eos, pad], "pad_token_id": pad}
    (path / "generation_config.json").write_text(json.dumps(gen, indent=2))
    save_file(_weights(cfg, arch, seed), str(path / "model.safetensors"),
              metadata={"format": "pt"})
    return path
