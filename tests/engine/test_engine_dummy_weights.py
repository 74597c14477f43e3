"""``load_format="dummy"``: random weights from config.json alone, served like real ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from minisgl_core.config.launch import ConfigError, LaunchConfig
from minisgl_core.engine.config import EngineConfig
from minisgl_core.offline import LLM
from minisgl_core.sampling import SamplingParams
from minisgl_core.store.random_weights import RandomCheckpoint, tensor_shapes


def _config_only(src: Path, dst: Path) -> Path:
    """The model directory without its weights: config.json and the tokenizer files."""
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, dst / f.name)
    return dst


def test_a_directory_without_weights_serves_random_ones(tiny_models, tmp_path: Path,
                                                        caplog) -> None:
    model = _config_only(tiny_models["qwen3"], tmp_path / "qwen3")
    greedy = SamplingParams(max_tokens=6, temperature=0)
    with caplog.at_level("WARNING", logger="minisgl_core.engine.weights"):
        llm = LLM(str(model), load_format="dummy", dtype="float32", num_threads=1)
    assert "RANDOM (--load-format dummy)" in caplog.text
    first = llm.generate("Hello world", greedy)[0]
    assert len(first.token_ids) == 6
    net = llm.engine.model
    layer = net.layers[0]
    # norms neutral (Qwen3's q/k norms too), matrices at std 0.02
    assert torch.equal(layer.ln_attn, torch.ones_like(layer.ln_attn))
    assert torch.equal(layer.qk_norm, torch.ones_like(layer.qk_norm))
    assert 0.015 < float(net.embed.std()) < 0.025
    # seeded: a second engine makes the same weights, so the same answer
    again = LLM(str(model), load_format="dummy", dtype="float32", num_threads=1)
    assert again.generate("Hello world", greedy)[0].token_ids == first.token_ids


def test_gemma_norms_are_centred(tiny_models) -> None:
    config = {"architectures": ["Gemma3ForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
              "vocab_size": 32, "num_hidden_layers": 1, "tie_word_embeddings": True}
    ckpt = RandomCheckpoint(config)
    norm = ckpt.get("model.layers.0.pre_feedforward_layernorm.weight")
    assert torch.equal(norm, torch.zeros(8, dtype=torch.bfloat16))  # 1 + weight == 1
    assert "lm_head.weight" not in ckpt and ckpt.shape("model.embed_tokens.weight") == (32, 8)
    # each tensor seeded by its name: the order of reading changes nothing
    q = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(ckpt.get(q), RandomCheckpoint(config).get(q))
    assert not torch.equal(ckpt.get(q), RandomCheckpoint(config, seed=1).get(q))


def test_every_tensor_the_checkpoint_has_is_made(tiny_models) -> None:
    from safetensors import safe_open

    for arch in ("llama", "qwen2", "qwen3", "gemma3"):
        config = json.loads((tiny_models[arch] / "config.json").read_text())
        with safe_open(str(tiny_models[arch] / "model.safetensors"), "pt") as f:
            real = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        assert tensor_shapes(config) == real, arch


def test_unknown_load_format_is_refused() -> None:
    with pytest.raises(ValueError, match="load_format"):
        EngineConfig(model="x", load_format="random")
    with pytest.raises(ConfigError, match="did you mean"):
        LaunchConfig(load_format="dumy")
    with pytest.raises(ValueError, match="Gemma3ForCausalLM"):
        tensor_shapes({"architectures": ["GPT2LMHeadModel"]})
