"""Convert a GGUF file into an HF-format fp32 safetensors directory (dequantizing k-quants).

Run as ``python -m minisgl_core.store.convert GGUF OUT_DIR ARCHITECTURE``: ``gguf_cache`` does,
in a child process (transformers' model classes and the dequantization's peak memory stay out of
the serving process), then renames OUT_DIR into place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def convert_gguf(gguf: Path, out: Path, architecture: str) -> None:
    """Dequantize ``gguf`` with transformers (through the gguf package) and write config,
    tokenizer and fp32 weights into ``out``, which must not exist yet."""
    from tqdm import tqdm

    bar = tqdm(total=4, desc=f"Converting {gguf.name} (once)", unit="step", file=sys.stderr)
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True, exist_ok=False)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(out)
    bar.update()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 config=gguf_config(gguf), dtype="float32")
    bar.update()
    config = model.config.to_dict()
    generation = model.generation_config.to_dict()
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # tied to embed_tokens: stored once
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    bar.update()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config.pop(key, None)
    config["architectures"] = [architecture]
    config["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True))
    bar.update()
    bar.close()


def gguf_config(gguf: Path) -> Any:
    """transformers' config of the file, with the head size the file states: transformers maps
    ``attention.key_length`` for some architectures only, and otherwise keeps its config class's
    default (Qwen3's 128), which does not fit every model."""
    from gguf import GGUFReader
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    fields = GGUFReader(gguf, "r").fields
    arch = fields["general.architecture"].contents()
    key_length = fields.get(f"{arch}.attention.key_length")
    if key_length is not None and hasattr(config, "head_dim"):
        config.head_dim = int(key_length.contents())
    return config


if __name__ == "__main__":
    convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
