"""Fixtures for the model store tests: tiny models and a local stand-in for the Hub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from minisgl_core.testing.hub_stub import HubStub, StubRepo, repo_from_dir
from minisgl_core.testing.own_cache import own_cache_dir
from minisgl_core.testing.tiny import make_tiny_model

GATED_TOKEN = "hf_stub_token_of_an_account_with_access"
EXTRAS = {"README.md": b"# a model card\n", "onnx/model.safetensors": b"not for minisgl",
          "pytorch_model.bin": b"a pickle minisgl never reads"}


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("store-tiny")
    return {arch: make_tiny_model(root / arch, arch, seed=i)
            for i, arch in enumerate(("llama", "qwen3"))}


def hub_repos(tiny: dict[str, Path]) -> list[StubRepo]:
    """The repos every stub serves: two servable tiny models (with files minisgl must not
    fetch beside them), a gated one, one with only .bin weights, one of an unknown
    architecture."""
    qwen3 = repo_from_dir("acme/tiny-qwen3", tiny["qwen3"])
    qwen3.files.update(EXTRAS)
    llama = repo_from_dir("acme/tiny-llama", tiny["llama"])
    gated = repo_from_dir("acme/gated-llama", tiny["llama"], gated=True, token=GATED_TOKEN)
    bin_only = repo_from_dir("acme/bin-only", tiny["llama"], skip=("model.safetensors",))
    bin_only.files["pytorch_model.bin"] = b"a pickle"
    gpt2 = repo_from_dir("acme/tiny-gpt2", tiny["llama"])
    config = json.loads(gpt2.files["config.json"])
    gpt2.files["config.json"] = json.dumps({**config, "architectures": ["GPT2LMHeadModel"],
                                            "model_type": "gpt2"}).encode()
    return [qwen3, llama, gated, bin_only, gpt2]


@pytest.fixture
def hub(tiny_dirs: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStub]:
    """A started stub, HF_ENDPOINT pointed at it and an empty HF cache of this test's own (the
    process's memo of fetched models emptied, as in a new process)."""
    from huggingface_hub import constants

    from minisgl_core.store import hub as store_hub

    stub = HubStub()
    for repo in hub_repos(tiny_dirs):
        stub.add(repo)
    stub.start()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(own_cache_dir(tmp_path / "minisgl")))
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    # read once at import by huggingface_hub; an earlier test's tokenizer process set it
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(store_hub, "_fetched", {})
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture(scope="session")
def tiny_all(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from minisgl_core.testing.tiny import ARCHES

    root = tmp_path_factory.mktemp("store-tiny-all")
    return {arch: make_tiny_model(root / arch, arch, seed=10 + i)
            for i, arch in enumerate(ARCHES)}
