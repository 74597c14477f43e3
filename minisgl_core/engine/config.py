"""Engine options (EngineConfig) and the model facts read from an HF model directory (ModelConfig,
the EOS ids)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minisgl_core.kernels.schemes import KV_CACHE_DTYPES, QUANTIZATION_OPTIONS

# Fallback KV pool size when num_pages is not given: enough for the context of a few requests
# without pushing a 135M-parameter fp32 model's process past ~1.5 GiB.
DEFAULT_KV_CACHE_BYTES = 384 * 1024 * 1024


def threads_per_rank(total: int | None, ranks: int) -> int:
    """Torch threads for each of ``ranks`` tensor-parallel ranks on one host, which share
    ``total`` threads (None: every core) between them, at least one each."""
    return max(1, (total or os.cpu_count() or 1) // ranks)


@dataclass(frozen=True)
class SpecOptions:
    """How many tokens n-gram speculation drafts and which n-gram sizes it looks up (vLLM's
    names; speculative.py)."""

    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be >= 1")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")


@dataclass(frozen=True)
class EngineConfig:
    """How to build an Engine; ``model`` is a model directory (``model_lookup.resolve_model``)."""

    model: str
    dtype: str = "float32"
    device: str = "cpu"
    num_pages: int | None = None  # None: sized from DEFAULT_KV_CACHE_BYTES
    page_size: int = 16
    max_seq_len_override: int | None = None
    max_running_requests: int = 128
    max_prefill_tokens: int = 512  # prompt tokens computed per step (chunked prefill budget)
    num_threads: int | None = None  # torch.set_num_threads; None leaves torch's default
    seed: int = 0  # for requests sampled without a seed of their own
    cache: str = "radix"  # "radix": reuse KV pages of cached prefixes; "naive": never reuse
    # "int8": int8 weights and per-token inputs (kernels/matmul/w8a8.py); "int8-wo", "int4":
    # weights only, int8 per output channel or 4 bits in groups of 32 (matmul/weight_only.py);
    # "auto": a GGUF's own weight format, "none" (or None): unquantized. The Engine resolves
    # "auto" and "none" first (quantization_choice.py): past that, None or a scheme
    quantization: str | None = None
    speculative: str | None = None  # "ngram": prompt-lookup speculation (speculative.py)
    num_speculative_tokens: int = 4  # draft tokens per step (k)
    # shortest suffix n-gram looked up: one-token matches mostly drafted wrong (docs/speculative.md)
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4  # longest suffix n-gram looked up
    # decode steps through torch.compile'd graphs (compiled.py); None: where it works
    # (compile_choice.py, the service's default)
    compile: bool | None = False
    # batch-invariant kernels: a request's tokens do not depend on the batch, the prefill
    # chunking, speculation or compilation (docs/speculative.md, "Deterministic mode")
    deterministic: bool = False
    # the prefix cache's disk tier (prefix_disk.py): None keeps it in RAM only
    prefix_cache_dir: str | None = None
    prefix_cache_disk_gb: float = 10.0  # budget of the page files in prefix_cache_dir
    # "auto": the model directory's safetensors; "dummy": random weights from its config.json
    load_format: str = "auto"
    # "auto": KV pages in the model's dtype; "int8": int8 with an fp16 scale per token and head
    # (kernels/kv_int8.py), about half bf16's bytes
    kv_cache_dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        if self.num_pages is not None and self.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {self.num_pages}")
        if self.max_running_requests < 1:
            raise ValueError("max_running_requests must be >= 1")
        if self.max_prefill_tokens < 1:
            raise ValueError("max_prefill_tokens must be >= 1")
        if self.max_seq_len_override is not None and self.max_seq_len_override < 2:
            raise ValueError("max_seq_len_override must be >= 2")
        if self.cache not in ("radix", "naive"):
            raise ValueError(f'cache must be "radix" or "naive", got {self.cache!r}')
        if self.quantization is not None and self.quantization not in QUANTIZATION_OPTIONS:
            raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_OPTIONS)} or "
                             f"None, got {self.quantization!r}")
        if self.speculative is not None and self.speculative != "ngram":
            raise ValueError(f'speculative must be "ngram" or None, got {self.speculative!r}')
        self.spec_options()  # checks them
        if self.deterministic and self.kv_cache_dtype != "auto":
            raise ValueError("deterministic needs kv_cache_dtype auto (its attention kernel "
                             "reads fp32 or bf16 pages)")
        if self.deterministic and self.quantization == "int8":
            raise ValueError("deterministic has no batch-invariant kernel for quantization "
                             "int8 (it has for none, int8-wo and int4)")
        if not self.prefix_cache_disk_gb > 0:
            raise ValueError(f"prefix_cache_disk_gb must be > 0, got {self.prefix_cache_disk_gb}")
        if self.load_format not in ("auto", "dummy"):
            raise ValueError(f'load_format must be "auto" or "dummy", got {self.load_format!r}')
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got "
                             f"{self.kv_cache_dtype!r}")

    def spec_options(self) -> SpecOptions:
        """The speculation options (ValueError when they do not fit together)."""
        return SpecOptions(self.num_speculative_tokens, self.prompt_lookup_min,
                           self.prompt_lookup_max)


def _as_id_set(value: Any) -> frozenset[int]:
    if value is None:
        return frozenset()
    if isinstance(value, int):
        return frozenset({value})
    return frozenset(int(v) for v in value)


@dataclass(frozen=True)
class ModelConfig:
    """The architecture facts the model code needs, from config.json (transformers 4.x or 5.x)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    rope_scaling: dict[str, Any] | None = None
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    # the whole config.json, for what one architecture alone reads (Gemma 3's layer types...)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dir(cls, path: Path) -> ModelConfig:
        """Read ``path/config.json``; raise ValueError naming what is missing."""
        raw = json.loads((path / "config.json").read_text())
        archs = raw.get("architectures") or []
        if not archs:
            raise ValueError(f"{path}/config.json has no 'architectures' entry")
        arch = archs[0]
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        # transformers 5 nests rope settings in rope_parameters; 4.x has rope_theta + rope_scaling
        rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
        theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        return cls(
            architecture=arch,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases; Llama says so with attention_bias
            attention_bias=bool(raw.get("attention_bias", arch == "Qwen2ForCausalLM")),
            mlp_bias=bool(raw.get("mlp_bias", False)),
            rope_scaling=None if rope_type == "default" else {**rope, "rope_type": rope_type},
            eos_token_ids=_as_id_set(raw.get("eos_token_id")),
            raw=raw,
        )


def eos_token_ids(path: Path, tokenizer: Any, cfg: ModelConfig) -> frozenset[int]:
    """The full EOS set: tokenizer, generation_config.json and config.json (lists included)."""
    ids = set(cfg.eos_token_ids)
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = path / "generation_config.json"
    if gen.is_file():
        value = json.loads(gen.read_text()).get("eos_token_id")
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return frozenset(ids)
