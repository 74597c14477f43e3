"""GGUF files served through the converter of the default model: a GGUF written from a tiny
model (with the gguf package, as llama.cpp lays one out) serves the tokens of its original."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minisgl_core.plugin.loading import build_manager, collect
from minisgl_core.plugin.model_lookup import ModelNotFoundError, resolve_model
from minisgl_core.store import gguf_cache
from minisgl_core.testing.hub_stub import HubStub, StubRepo
from minisgl_core.testing.own_cache import own_cache_dir
from minisgl_core.testing.tiny_gguf import write_gguf

PROMPTS = ["The capital of France is", "def add(a, b):", "你好，世界"]
# Q8_0 keeps each block of 32 weights as int8 times one scale d = absmax / 127, stored in fp16:
# a weight comes back within half a step (d / 2) plus 127 times the scale's fp16 rounding
# (d * 2**-11 each), i.e. within absmax * (0.5 + 127 * 2**-11) / 127 < absmax / 225 of its block
Q8_0_TOLERANCE = (0.5 + 127 * 2**-11) / 127


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(own_cache_dir(tmp_path / "minisgl")))
    return tmp_path / "minisgl" / "gguf"


def resolve(spec: str, **kwargs: str) -> Path:
    pm = build_manager(autoload=False)
    return Path(resolve_model(pm, spec, architectures=collect(pm).models.names(), **kwargs))


def greedy(model: str | Path, n: int = 16) -> list[list[int]]:
    from minisgl_core import LLM, SamplingParams

    # unquantized: these tests compare the converted weights' tokens with the original's and
    # transformers' (the GGUF's own format by default: test_store_gguf_quantization.py)
    llm = LLM(str(model), num_threads=1, quantization="none")
    done = llm.generate(PROMPTS, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))
    return [out.prompt_token_ids + out.token_ids for out in done]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_an_f32_gguf_serves_exactly_its_original(arch: str, tiny_all: dict[str, Path],
                                                 cache: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    gguf = write_gguf(tiny_all[arch], tmp_path / f"tiny-{arch}.gguf")
    converted = resolve(str(gguf))
    assert converted.parent == cache and converted.name.startswith(f"tiny-{arch}-")
    original = load_file(str(tiny_all[arch] / "model.safetensors"))
    weights = load_file(str(converted / "model.safetensors"))
    assert set(weights) == set(original)
    assert all(bool((weights[k] == original[k]).all()) for k in original)
    assert greedy(gguf) == greedy(tiny_all[arch])


def transformers_greedy(gguf: Path, n: int = 16) -> list[list[int]]:
    """transformers' greedy tokens on the same GGUF file (it dequantizes it itself)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    from minisgl_core.store.convert import gguf_config

    # with the head size the file states, which transformers reads for some architectures only
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 config=gguf_config(gguf),
                                                 dtype=torch.float32).eval()
    out = []
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.inference_mode():
            done = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False)
        out.append(done[0].tolist())
    return out


def test_a_q8_0_gguf_is_within_its_quantization_step_and_served_as_transformers_does(
        tiny_all: dict[str, Path], cache: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    source = tiny_all["qwen3"]
    gguf = write_gguf(source, tmp_path / "tiny-qwen3-Q8_0.gguf", "Q8_0")
    original = load_file(str(source / "model.safetensors"))
    weights = load_file(str(resolve(str(gguf)) / "model.safetensors"))
    for name, want in original.items():
        got = weights[name].numpy()
        if want.ndim == 1:  # norms are kept in F32
            assert (got == want.numpy()).all(), name
            continue
        blocks = want.numpy().reshape(-1, 32)
        step = np.abs(blocks).max(axis=1, keepdims=True) * Q8_0_TOLERANCE
        assert (np.abs(got.reshape(-1, 32) - blocks) <= step).all(), name
    # the tokens may differ from the original's at a near tie (by up to ~0.3 nats on this tiny
    # model's peaked logits); on the same dequantized weights they are transformers' own
    assert greedy(gguf) == transformers_greedy(gguf)


def test_conversion_happens_once_per_content(tiny_all: dict[str, Path], cache: Path,
                                             tmp_path: Path, monkeypatch) -> None:
    gguf = write_gguf(tiny_all["llama"], tmp_path / "a.gguf")
    first = resolve(str(gguf))
    renamed = tmp_path / "elsewhere" / "b.gguf"
    renamed.parent.mkdir()
    renamed.write_bytes(gguf.read_bytes())

    def no_second_conversion(*args: object) -> None:
        raise AssertionError("converted twice")

    monkeypatch.setattr(gguf_cache, "_convert_in_subprocess", no_second_conversion)
    assert resolve(str(gguf)) == first
    assert resolve(str(renamed)) == first  # the same content, under another name


def test_two_processes_converting_one_file_convert_it_once(tiny_all: dict[str, Path],
                                                           cache: Path, tmp_path: Path) -> None:
    import os

    gguf = write_gguf(tiny_all["qwen3"], tmp_path / "shared.gguf")
    code = ("import sys; from minisgl_core.store.gguf_cache import ensure_converted; "
            "print(ensure_converted(sys.argv[1]))")
    env = {**os.environ, "MINISGL_CACHE_DIR": str(cache.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(gguf)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1
    converting = [err for _, err in outs if "Converting shared.gguf" in err]
    assert len(converting) == 1  # the other waited on the lock, then found it done
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == \
        [Path(outs[0][0].strip()).name]


def test_gguf_architectures_minisgl_does_not_serve_are_one_line(cache: Path,
                                                                tmp_path: Path) -> None:
    import gguf

    def header_only(arch: str) -> Path:
        path = tmp_path / f"{arch}.gguf"
        writer = gguf.GGUFWriter(str(path), arch)
        writer.add_block_count(1)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path

    with pytest.raises(ModelNotFoundError) as info:
        resolve(str(header_only("phi3")))
    assert str(info.value) == ("phi3.gguf: GGUF architecture 'phi3' is not one minisgl serves "
                               "(GGUF architectures: gemma3, llama, qwen2, qwen3)")
    pm = build_manager(autoload=False)
    with pytest.raises(ModelNotFoundError, match="is a Gemma3ForCausalLM, which minisgl does "
                                                 "not serve .supported: LlamaForCausalLM"):
        resolve_model(pm, str(header_only("gemma3")), architectures=("LlamaForCausalLM",))
    assert not cache.exists() or not [p for p in cache.iterdir() if not p.name.startswith(".")]


def test_a_gguf_file_of_a_hub_repo(tiny_all: dict[str, Path], cache: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    from minisgl_core.store import hub as store_hub

    gguf = write_gguf(tiny_all["qwen3"], tmp_path / "tiny-qwen3-Q8_0.gguf", "Q8_0")
    repo = StubRepo("acme/tiny-qwen3-GGUF", {"README.md": b"# ggufs\n",
                                              "tiny-qwen3-Q8_0.gguf": gguf.read_bytes()})
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(store_hub, "_fetched", {})
    with HubStub() as stub:
        stub.add(repo)
        monkeypatch.setenv("HF_ENDPOINT", stub.url)
        with pytest.raises(ModelNotFoundError, match="acme/tiny-qwen3-GGUF holds GGUF files, not "
                                                     "safetensors: add --gguf-file NAME"):
            resolve("acme/tiny-qwen3-GGUF")
        with pytest.raises(ModelNotFoundError, match="has no file 'x.gguf' .its GGUF files: "
                                                     "tiny-qwen3-Q8_0.gguf"):
            resolve("acme/tiny-qwen3-GGUF", gguf_file="x.gguf")
        converted = resolve("acme/tiny-qwen3-GGUF", gguf_file="tiny-qwen3-Q8_0.gguf")
        assert stub.downloads() == ["acme/tiny-qwen3-GGUF/tiny-qwen3-Q8_0.gguf"]
    from minisgl_core.store.naming import model_name_of

    assert model_name_of(converted) == "acme/tiny-qwen3-GGUF"
    assert converted == resolve(str(gguf))  # the same content as the local file
    monkeypatch.setattr(store_hub, "_fetched", {})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # and from the HF cache
    assert resolve("acme/tiny-qwen3-GGUF", gguf_file="tiny-qwen3-Q8_0.gguf") == converted


def test_launch_serves_a_gguf_file(tiny_all: dict[str, Path], cache: Path,
                                   tmp_path: Path) -> None:
    import os

    from minisgl_core.testing.service import launch_service

    from .test_store_hub_launch import ARGS, PROMPT, greedy_tokens
    from .test_store_hub_launch import transformers_greedy as hf_dir_greedy

    gguf = write_gguf(tiny_all["qwen3"], tmp_path / "tiny-qwen3.gguf")
    env = {"MINISGL_CACHE_DIR": os.environ["MINISGL_CACHE_DIR"]}
    svc = launch_service(str(gguf), args=ARGS, log_dir=tmp_path, env=env)
    try:
        assert svc.model_name() == "tiny-qwen3"
        got = greedy_tokens(svc.url, "tiny-qwen3", 12)
    finally:
        svc.stop()
    assert "Converting tiny-qwen3.gguf (once)" in svc.log()
    assert got == hf_dir_greedy(tiny_all["qwen3"], PROMPT, 12)
