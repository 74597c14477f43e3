"""``--quantization auto`` (the default): a GGUF is served in its own weight format, an HF
checkpoint unquantized; ``none`` opts out; the choice and why in the log, /v1/models and the
engine's facts, on every host kind (a masked AVX2-only host included)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from minisgl_core.engine.quantization_choice import (
    choose_quantization,
    scheme_of_gguf_type,
    scheme_of_weight_types,
)
from minisgl_core.kernels import cpu_features
from minisgl_core.store import gguf_cache
from minisgl_core.store.naming import MARKER
from minisgl_core.testing.service import RunningService, launch_service
from minisgl_core.testing.tiny_gguf import write_gguf

# each type the tiny writer makes -> the scheme auto serves it in
WRITTEN = {"F32": None, "F16": None, "Q8_0": "int8-wo", "Q4_0": "int4", "Q4_1": "int4"}


@pytest.fixture(scope="module")
def q4_1(tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama written as a Q4_1 GGUF and converted (into a cache of this module's own):
    the converted directory, which records the file's weight types."""
    root = tmp_path_factory.mktemp("q4_1")
    gguf = write_gguf(tiny_dirs["llama"], root / "tiny-llama-Q4_1.gguf", "Q4_1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINISGL_CACHE_DIR", str(root / "cache"))
        return gguf_cache.ensure_converted(gguf)


def test_each_gguf_type_maps_to_the_nearest_scheme_with_at_least_its_bits() -> None:
    int4 = ("Q4_0", "Q4_1", "Q4_K", "Q2_K", "Q3_K", "IQ4_XS", "IQ2_XXS", "TQ1_0", "MXFP4")
    assert {t: scheme_of_gguf_type(t) for t in int4} == dict.fromkeys(int4, "int4")
    int8 = ("Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "Q8_K")
    assert {t: scheme_of_gguf_type(t) for t in int8} == dict.fromkeys(int8, "int8-wo")
    for unquantized in ("F32", "F16", "BF16", "I32", "SOMETHING_NEW"):
        assert scheme_of_gguf_type(unquantized) is None, unquantized


def test_a_mixed_file_goes_by_the_type_holding_most_weights() -> None:
    # a Q4_K_M file: most tensors and weights Q4_K, some ffn_down / attn_v and the head Q6_K
    q4_k_m = {"Q4_K": [150, 900_000_000], "Q6_K": [47, 600_000_000], "F16": [1, 1_000]}
    choice = scheme_of_weight_types(q4_k_m)
    assert choice.scheme == "int4"
    assert choice.reason.startswith("the GGUF's weight matrices are mostly Q4_K: 150 of 198 "
                                    "tensors, 60% of the weights")
    # by weights, not by tensors: here the many small Q4_K tensors hold fewer of them
    assert scheme_of_weight_types({"Q4_K": [100, 10], "Q8_0": [1, 1000]}).scheme == "int8-wo"
    assert scheme_of_weight_types({}).scheme is None


@pytest.mark.parametrize("qtype", list(WRITTEN))
def test_a_written_gguf_records_its_types_and_auto_picks_its_scheme(
        qtype: str, tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    gguf = write_gguf(tiny_dirs["qwen3"], tmp_path / f"tiny-{qtype}.gguf", qtype)
    types = gguf_cache.gguf_weight_types(gguf)
    # 2 layers x 7 matrices and the (tied) embedding, all of the file's type
    assert types == {qtype: [15, types[qtype][1]]} and types[qtype][1] > 0
    choice = scheme_of_weight_types(types)
    assert choice.scheme == WRITTEN[qtype]
    assert choice.reason == f"the GGUF's weight matrices are {qtype}: 15 of 15 tensors, 100% " \
                            "of the weights"


def test_an_embedding_that_is_not_the_lm_head_is_not_counted(tmp_path: Path) -> None:
    from minisgl_core.testing.tiny import make_tiny_model

    untied = make_tiny_model(tmp_path / "qwen2", "qwen2")  # an output.weight of its own
    types = gguf_cache.gguf_weight_types(write_gguf(untied, tmp_path / "q.gguf", "Q8_0"))
    # 2 layers x 7 matrices (73,728 weights) and the LM head [384 x 64]: no lookup table
    assert types == {"Q8_0": [15, 73_728 + 384 * 64]}


def test_an_hf_checkpoint_random_weights_and_another_device_get_none(
        tiny_dirs: dict[str, Path], q4_1: Path) -> None:
    hf = choose_quantization(tiny_dirs["llama"])
    assert hf.scheme is None and hf.reason.startswith("not converted from a GGUF")
    assert choose_quantization(q4_1).scheme == "int4"
    dummy = choose_quantization(q4_1, load_format="dummy")
    assert dummy.scheme is None and "--load-format dummy" in dummy.reason
    cuda = choose_quantization(q4_1, device="cuda")
    assert cuda.scheme is None and "int4), but the weight-only kernels run on the CPU" in \
        cuda.reason


def test_an_older_marker_without_types_gets_none(tmp_path: Path) -> None:
    (tmp_path / MARKER).write_text(json.dumps({"name": "old", "converter": 1}))
    choice = choose_quantization(tmp_path)
    assert choice.scheme is None and "not recorded" in choice.reason


def test_q4_1_requantizes_to_int4_exactly(q4_1: Path) -> None:
    """int4 is Q4_1's layout: the converted (dequantized) matrices come back unchanged."""
    from safetensors.torch import load_file

    from minisgl_core.kernels.matmul.weight_only import dequantize_int4, quantize_int4

    matrices = {k: w for k, w in load_file(str(q4_1 / "model.safetensors")).items()
                if w.ndim == 2}
    assert len(matrices) == 15
    for name, w in matrices.items():
        packed = quantize_int4(w)
        assert bool((dequantize_int4(packed) == w).all()) and not packed.symmetric, name


def test_a_q4_0_gguf_stays_q4_0_in_the_engine(tiny_dirs: dict[str, Path], tmp_path: Path
                                            ) -> None:
    """A Q4_0 file's matrices come back as Q4_0 (exactly, the fp32 converted weights) and the
    engine keeps them so, in bf16 too (the panels then without mins)."""
    from safetensors.torch import load_file

    from minisgl_core import LLM, SamplingParams
    from minisgl_core.kernels.matmul.weight_only import dequantize_int4, quantize_int4

    gguf = write_gguf(tiny_dirs["llama"], tmp_path / "tiny-llama-Q4_0.gguf", "Q4_0")
    with pytest.MonkeyPatch.context() as patch:  # converted into a cache of its own
        patch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))
        q4_0 = gguf_cache.ensure_converted(gguf)
    for name, w in load_file(str(q4_0 / "model.safetensors")).items():
        if w.ndim == 2:
            packed = quantize_int4(w)
            assert packed.symmetric and bool((dequantize_int4(packed) == w).all()), name
    llm = LLM(str(q4_0), num_threads=1, num_pages=32, dtype="bfloat16")
    assert llm.engine.info()["quantization"] == "int4"
    roles = ("qkv", "o", "gate_up", "down")
    assert all(getattr(layer, r).weight.symmetric for layer in llm.engine.model.layers
               for r in roles)
    greedy = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    assert len(llm.generate("hello", greedy)[0].token_ids) == 4


def test_llm_serves_a_q4_1_gguf_as_int4_unless_told_none(q4_1: Path) -> None:
    from minisgl_core import LLM, SamplingParams

    greedy = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    auto = LLM(str(q4_1), num_threads=1, num_pages=32)
    facts = auto.engine.info()
    assert facts["quantization"] == "int4"
    assert facts["quantization_reason"] == ("auto: the GGUF's weight matrices are Q4_1: 15 of 15 "
                                            "tensors, 100% of the weights")
    assert len(auto.generate("hello", greedy)[0].token_ids) == 6
    none = LLM(str(q4_1), num_threads=1, num_pages=32, quantization="none")
    assert none.engine.info()["quantization"] == "none"
    assert none.engine.info()["quantization_reason"] == "--quantization none given"
    assert len(none.generate("hello", greedy)[0].token_ids) == 6
    kept = LLM(str(q4_1), num_threads=1, num_pages=32, quantization="int8-wo")
    assert kept.engine.info()["quantization_reason"] == "--quantization int8-wo given"


def test_deterministic_keeps_the_gguf_scheme(q4_1: Path) -> None:
    from minisgl_core import LLM, SamplingParams

    llm = LLM(str(q4_1), num_threads=1, num_pages=32, deterministic=True)
    assert llm.engine.info()["quantization"] == "int4"  # it has a batch-invariant int4 kernel
    out = llm.generate(["hello", "hello"], SamplingParams(max_tokens=6, temperature=0))
    assert out[0].token_ids == out[1].token_ids and out[0].token_ids


@pytest.fixture(scope="module")
def masked(q4_1: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """The Q4_1 model served with no quantization flag, as on an AVX2-only host."""
    svc = launch_service(str(q4_1), args=["-s", "num_threads=1", "--num-pages", "64"],
                         log_dir=tmp_path_factory.mktemp("logs"),
                         env=cpu_features.masked_env("avx2", {}))
    try:
        yield svc
    finally:
        svc.stop()


def test_models_meta_names_the_scheme_auto_chose_and_why_on_an_avx2_host(
        masked: RunningService) -> None:
    card = httpx.get(f"{masked.url}/v1/models", timeout=30).json()["data"][0]
    meta = card["meta"]
    assert meta["quantization"] == "int4"
    assert meta["quantization_reason"].startswith("auto: the GGUF's weight matrices are Q4_1: "
                                                  "15 of 15 tensors")
    info = httpx.get(f"{masked.url}/v1/engine/info", timeout=30).json()
    assert (info["quantization"], info["quantization_reason"]) == \
        (meta["quantization"], meta["quantization_reason"])
    assert "--quantization auto: int4 (the GGUF's weight matrices are Q4_1" in masked.log()
    answer = httpx.post(f"{masked.url}/v1/completions", timeout=60, json={
        "model": card["id"], "prompt": "hello", "max_tokens": 4, "temperature": 0,
        "ignore_eos": True})
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 4


def test_tensor_parallel_ranks_serve_the_scheme_rank_0_chose(q4_1: Path) -> None:
    from minisgl_core import LLM, SamplingParams

    with LLM(str(q4_1), tp=2, num_threads=1, num_pages=32) as two:
        facts = two.engine.info()
        assert facts["quantization"] == "int4"
        assert facts["quantization_reason"].startswith("auto: the GGUF's weight matrices are")
        out = two.generate("hello", SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
        assert len(out[0].token_ids) == 4


def test_the_launch_setting_defaults_to_auto_and_takes_none_from_every_layer() -> None:
    from minisgl_core.config.launch import ConfigError, LaunchConfig
    from minisgl_core.config.sources import load_config

    assert LaunchConfig().quantization == "auto"
    assert load_config(env={}, overrides=["quantization=none"]).quantization == "none"
    assert load_config(env={"MINISGL_QUANTIZATION": "none"}).quantization == "none"
    assert load_config(env={}, flags={"quantization": "int4"}).quantization == "int4"
    with pytest.raises(ConfigError, match="quantization must be one of auto, none, int8, "
                                          "int8-wo, int4"):
        load_config(env={}, overrides=["quantization=int3"])
