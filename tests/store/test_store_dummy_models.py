"""Random models at public shapes: the shipped configs, their safetensors and their GGUF."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from minisgl_core.engine.config import ModelConfig
from minisgl_core.engine.weights import Checkpoint
from minisgl_core.offline import LLM
from minisgl_core.sampling import SamplingParams
from minisgl_core.store import dummy_models
from minisgl_core.store.convert import convert_gguf
from minisgl_core.store.dummy_gguf import llama3_rope_factors, write_dummy_gguf
from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.random_weights import RandomCheckpoint, parameter_count, tokenizer_size


def _tiny_config(tiny_dirs: dict[str, Path], arch: str) -> dict[str, Any]:
    config = json.loads((tiny_dirs[arch] / "config.json").read_text())
    config["vocab_size"] = 448  # more rows than the tokenizer has tokens, as in the real ones
    return config


@pytest.fixture(scope="module")
def written(tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dummy-models")
    return {arch: dummy_models.write_dummy_model(_tiny_config(tiny_dirs, arch), root / arch,
                                                 tiny_dirs[arch])
            for arch in ("llama", "qwen3")}


def test_public_configs_have_their_models_sizes() -> None:
    assert {"Qwen3-0.6B", "Qwen3-1.7B", "Llama-3.2-1B"} <= set(dummy_models.config_names())
    # parameters (a tied LM head once), as the model cards state them
    expected = {"Qwen3-0.6B": 0.596e9, "Qwen3-1.7B": 1.72e9, "Llama-3.2-1B": 1.236e9}
    for name, count in expected.items():
        config = dummy_models.model_config(name)
        assert parameter_count(config) == pytest.approx(count, rel=0.01), name
    # the engine reads them as they are
    llama = dummy_models.model_config("Llama-3.2-1B")
    assert llama["rope_scaling"]["rope_type"] == "llama3" and llama["head_dim"] == 64


def test_an_unknown_config_name_is_refused_with_the_closest(tmp_path: Path,
                                                            monkeypatch) -> None:
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match='did you mean "Qwen3-1.7B"'):
        dummy_models.ensure_dummy_model("qwen3-1.7b")
    assert not (tmp_path / "dummy").exists()


def test_written_safetensors_hold_the_random_weights(written: dict[str, Path]) -> None:
    for arch, path in written.items():
        config = json.loads((path / "config.json").read_text())
        tokens = tokenizer_size(path)
        assert tokens is not None and tokens < 448
        assert config["vocab_size"] == 448 and config["eos_token_id"] < tokens
        ckpt, made = Checkpoint(path), RandomCheckpoint(config, tokens=tokens)
        assert ckpt.names() == made.names(), arch
        for name in made.names():
            assert torch.equal(ckpt.get(name), made.get(name)), name
        # the rows of ids the tokenizer cannot write are zero, the others random
        embed = ckpt.get("model.embed_tokens.weight")
        assert not embed[tokens:].any() and bool(embed[:tokens].all(dim=1).any())
        assert ModelConfig.from_dir(path).vocab_size == 448


def test_served_from_the_files_or_made_at_load_the_answer_is_the_same(
        written: dict[str, Path]) -> None:
    greedy = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    path = str(written["qwen3"])
    from_files = LLM(path, dtype="float32", num_threads=1)
    made = LLM(path, dtype="float32", num_threads=1, load_format="dummy")
    assert from_files.engine.load_report.stored == made.engine.load_report.stored == (
        "bfloat16",)
    assert torch.equal(from_files.engine.model.embed, made.engine.model.embed)
    expected = from_files.generate("Hello world", greedy)[0].token_ids
    assert len(expected) == 16 and made.generate("Hello world", greedy)[0].token_ids == expected
    assert max(expected) < (tokenizer_size(written["qwen3"]) or 0)  # only ids it can write


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_gguf_converts_back_to_the_same_weights(written: dict[str, Path], arch: str,
                                                    tmp_path: Path) -> None:
    gguf = write_dummy_gguf(written[arch], tmp_path / f"{arch}-F16.gguf")
    back = tmp_path / "converted"
    convert_gguf(gguf, back, json.loads((written[arch] / "config.json").read_text())
                 ["architectures"][0])
    ckpt = Checkpoint(back)
    made = RandomCheckpoint(json.loads((written[arch] / "config.json").read_text()),
                            tokens=tokenizer_size(written[arch]))
    for name in made.names():  # Llama's q/k permutation undone, f16 within its precision
        torch.testing.assert_close(ckpt.get(name), made.get(name).float(), rtol=1e-3,
                                   atol=1e-7, msg=name)


def test_llama3_rope_factors_match_the_engines_scaling(tmp_path: Path) -> None:
    from minisgl_core.engine.models.decoder import rope_inv_freq

    config = dummy_models.model_config("Llama-3.2-1B")
    (tmp_path / "config.json").write_text(json.dumps(config))
    factors = torch.tensor(llama3_rope_factors(config, 64), dtype=torch.float64)
    plain = 1.0 / (config["rope_theta"] ** (torch.arange(0, 64, 2).double() / 64))
    # llama.cpp divides each frequency by its factor: the same frequencies the engine uses
    scaled = rope_inv_freq(ModelConfig.from_dir(tmp_path)).double()
    torch.testing.assert_close(plain / factors, scaled, rtol=1e-5, atol=0)
    assert factors[0] == 1.0 and factors[-1] == 32.0


def test_models_dummy_prints_the_cached_directory_and_its_gguf(
        tiny_dirs: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from minisgl_core.cli.app import make_app
    from minisgl_core.plugin.loading import build_manager

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(make_app(build_manager(autoload=False)),
                                    ["models", "dummy", *args])
        return result.exit_code, result.output

    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path))
    code, output = run("Qwen3-1.5B")
    assert code == 1 and 'did you mean "Qwen3-1.7B"?' in output
    # a cached directory is used as it is (here one written at tiny shapes in its place)
    cached = dummy_models.dummy_dir("Qwen3-0.6B")
    dummy_models.write_dummy_model(_tiny_config(tiny_dirs, "qwen3"), cached, tiny_dirs["qwen3"])
    (cached / dummy_models.STAMP).write_text(json.dumps(
        {"version": dummy_models.STAMP_VERSION, "seed": 0}))
    assert run("Qwen3-0.6B") == (0, f"{cached}\n")
    code, output = run("Qwen3-0.6B", "--gguf")
    gguf = cached / "gguf" / "Qwen3-0.6B-F16.gguf"
    assert (code, output) == (0, f"{gguf}\n") and gguf.stat().st_size > 0
    assert sorted(p.name for p in cached.iterdir() if p.name.startswith(".")) == []
