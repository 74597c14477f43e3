"""Random weights for a model's ``config.json`` (``--load-format dummy``), one tensor at a time.

``RandomCheckpoint`` reads like ``engine.weights.Checkpoint``: the engine loads it through the
model's own ``load_weights``, so every architecture, quantization and tensor-parallel shard
works as with real weights. Each tensor is seeded by its name, so a tensor's values do not depend
on the order it is read in, and ``dummy_models`` writes the very same tensors to safetensors and
GGUF files. Values: normal with std 0.02 (as models are initialised), norms at their neutral value
(1, or 0 for Gemma's norms, which scale by ``1 + weight``), generated directly in bf16 (as real
checkpoints are stored), so loading never holds an fp32 copy of more than one tensor. Where the
tokenizer has fewer tokens than the config's vocabulary (a public config served with another
tokenizer), the embedding and LM head rows past it are zero: their logit is 0 against the random
ones of real tokens, so greedy decoding only emits ids the tokenizer can write.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

STD = 0.02  # transformers' initializer_range of these families
STORED_DTYPE = "bfloat16"
# the architectures whose tensor names and shapes ``tensor_shapes`` knows
ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM")
_QK_NORM = ("Qwen3ForCausalLM", "Gemma3ForCausalLM")
_CENTRED_NORMS = ("Gemma3ForCausalLM",)  # RMSNorm scaling by 1 + weight: neutral at 0
_VOCAB_ROWS = ("model.embed_tokens.weight", "lm_head.weight")  # [V, H]: a row per token id


def architecture(config: Mapping[str, Any]) -> str:
    """The config's architecture; ValueError unless random weights can be made for it."""
    arch = (config.get("architectures") or [""])[0]
    if arch not in ARCHITECTURES:
        raise ValueError(f"random weights (--load-format dummy) are made for "
                         f"{', '.join(ARCHITECTURES)}; config.json says {arch or 'nothing'!r}")
    return str(arch)


def tensor_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every HF tensor name of the config's model and its shape, in file order."""
    arch = architecture(config)
    hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab, layers = int(config["vocab_size"]), int(config["num_hidden_layers"])
    # as engine.config.ModelConfig reads them: Qwen2 has q/k/v biases unless told otherwise
    attention_bias = bool(config.get("attention_bias", arch == "Qwen2ForCausalLM"))
    mlp_bias = bool(config.get("mlp_bias", False))
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        norms = ["input_layernorm", "post_attention_layernorm"]
        if arch == "Gemma3ForCausalLM":
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        for norm in norms:
            shapes[f"{p}{norm}.weight"] = (hidden,)
        for name, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim),
                           ("v", kv_heads * head_dim)):
            shapes[f"{p}self_attn.{name}_proj.weight"] = (rows, hidden)
            if attention_bias:
                shapes[f"{p}self_attn.{name}_proj.bias"] = (rows,)
        shapes[f"{p}self_attn.o_proj.weight"] = (hidden, heads * head_dim)
        # Llama's attention_bias covers o_proj too; Qwen2's biases are q/k/v only
        if attention_bias and arch != "Qwen2ForCausalLM":
            shapes[f"{p}self_attn.o_proj.bias"] = (hidden,)
        if arch in _QK_NORM:
            shapes[f"{p}self_attn.q_norm.weight"] = (head_dim,)
            shapes[f"{p}self_attn.k_norm.weight"] = (head_dim,)
        for name, shape in (("gate", (inter, hidden)), ("up", (inter, hidden)),
                            ("down", (hidden, inter))):
            shapes[f"{p}mlp.{name}_proj.weight"] = shape
            if mlp_bias:
                shapes[f"{p}mlp.{name}_proj.bias"] = shape[:1]
    shapes["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def parameter_count(config: Mapping[str, Any]) -> int:
    """How many weights the config's model has (a tied LM head counted once)."""
    total = 0
    for shape in tensor_shapes(config).values():
        n = 1
        for dim in shape:
            n *= dim
        total += n
    return total


def tokenizer_size(model_dir: Path) -> int | None:
    """How many ids the directory's tokenizer.json has (None without one)."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    tokenizer = json.loads(path.read_text())
    ids = [int(t["id"]) for t in tokenizer.get("added_tokens", [])]
    vocab = tokenizer.get("model", {}).get("vocab")
    ids += list(vocab.values()) if isinstance(vocab, dict) else [len(vocab or []) - 1]
    return max(ids) + 1 if ids else None


class RandomCheckpoint:
    """A ``Checkpoint`` of random tensors for ``config`` (a parsed config.json), made on read;
    ``tokens``: how many ids the tokenizer has (the vocabulary rows past it are zero)."""

    def __init__(self, config: Mapping[str, Any], seed: int = 0,
                 tokens: int | None = None) -> None:
        self._shapes = tensor_shapes(config)
        self._centred = architecture(config) in _CENTRED_NORMS
        self.seed = seed
        self.tokens = tokens
        self.bytes_read = 0  # bytes generated so far (the engine's load report counts them)
        self.stored: Counter[str] = Counter()

    def names(self) -> list[str]:
        """Every tensor name, sorted."""
        return sorted(self._shapes)

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape, without making it."""
        return self._shapes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._shapes

    def get(self, name: str) -> torch.Tensor:
        """One tensor in bf16, the same for the same (seed, name) every time."""
        import torch

        if name not in self._shapes:
            raise KeyError(f"checkpoint has no tensor {name!r}")
        shape = self._shapes[name]
        if name.endswith("norm.weight"):
            out = torch.full(shape, 0.0 if self._centred else 1.0, dtype=torch.bfloat16)
        else:
            # seeded by name: the same values whichever tensors were read before
            g = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}:{name}".encode()))
            out = torch.randn(shape, generator=g, dtype=torch.bfloat16).mul_(STD)
            if self.tokens is not None and name in _VOCAB_ROWS:
                out[self.tokens:] = 0  # ids the tokenizer cannot write: never the argmax
        self.bytes_read += out.numel() * out.element_size()
        self.stored[STORED_DTYPE] += out.numel() * out.element_size()
        return out


__all__ = ["ARCHITECTURES", "RandomCheckpoint", "architecture", "parameter_count",
           "tensor_shapes", "tokenizer_size"]
