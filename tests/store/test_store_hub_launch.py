"""`minisgl launch --model ORG/NAME` against a local stand-in for the Hub: the service serves
the fetched model as transformers computes it, the cache serves it when the Hub is gone, and
every refusal is one line and a non-zero exit before any worker starts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from minisgl_core.testing.hub_stub import HubStub
from minisgl_core.testing.own_cache import own_cache_dir
from minisgl_core.testing.service import launch_service

from .conftest import hub_repos

# One torch thread, as in tests/service: OpenMP threads that wait for each other crawl when
# other processes hold the cores.
ARGS = ["--max-seq-len-override", "256", "--num-pages", "64", "-s", "num_threads=1"]
PROMPT = "The capital of France is"


@pytest.fixture
def stub(tiny_dirs: dict[str, Path]) -> Iterator[HubStub]:
    with HubStub() as hub:
        for repo in hub_repos(tiny_dirs):
            hub.add(repo)
        yield hub


def hub_env(stub: HubStub, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a launch against the stub, with a cache of this test's own; online
    unless ``extra`` says otherwise (launch_service lays it over this process's environment,
    where an earlier test's tokenizer may have set HF_HUB_OFFLINE)."""
    env = {k: v for k, v in os.environ.items() if k == "MINISGL_COMPILE"
           or not k.startswith(("MINISGL_", "HF_")) and k != "TRANSFORMERS_OFFLINE"}
    return {**env, "HF_ENDPOINT": stub.url, "HF_HOME": str(tmp_path / "hf"),
            "MINISGL_CACHE_DIR": str(own_cache_dir(tmp_path / "minisgl")), "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0", **extra}


def transformers_greedy(model_dir: Path, prompt: str, n: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model_dir)(prompt, return_tensors="pt").input_ids
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                             do_sample=False)
    return out[0, ids.shape[1]:].tolist()  # type: ignore[no-any-return]


def greedy_tokens(url: str, model: str, n: int) -> list[int]:
    body = {"model": model, "prompt": PROMPT, "max_tokens": n, "temperature": 0,
            "return_token_ids": True}
    done = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()
    return list(done["choices"][0]["token_ids"])


def test_a_hub_model_is_served_as_transformers_computes_it_then_from_the_cache(
        stub: HubStub, tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    # one architecture: the download and the cache do not depend on it, and each one is held to
    # transformers in tests/engine (and qwen3 through a service in test_store_gguf.py)
    repo_id = "acme/tiny-llama"
    env = hub_env(stub, tmp_path)
    svc = launch_service(repo_id, args=ARGS, log_dir=tmp_path, env=env)
    try:
        assert svc.model_name() == repo_id
        got = greedy_tokens(svc.url, repo_id, 16)
    finally:
        svc.stop()
    assert "Fetching 5 files: 100%" in svc.log()  # the progress bar, in the launcher's log
    assert got == transformers_greedy(tiny_dirs["llama"], PROMPT, 16)
    fetched = stub.downloads()
    assert all(f.startswith(repo_id) for f in fetched) and len(fetched) == 5, fetched
    stub.stop()  # the second launch reads the cache
    again = launch_service(repo_id, args=ARGS, log_dir=tmp_path, env=env)
    try:
        assert greedy_tokens(again.url, repo_id, 16) == got
    finally:
        again.stop()
    assert "Fetching" not in again.log()


def launch_error(model: str, env: dict[str, str], *args: str) -> str:
    """The stderr of a launch that must fail before any worker starts: one line, exit 1."""
    cmd = [sys.executable, "-m", "minisgl_core", "launch", "--model", model, "--port", "0",
           *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 1, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("minisgl: "), done.stderr
    assert "minisgl::" not in done.stderr + done.stdout  # no worker was started
    return lines[0].removeprefix("minisgl: ")


def test_launch_refusals_are_one_line_before_any_worker(stub: HubStub, tmp_path: Path) -> None:
    env = hub_env(stub, tmp_path)
    assert launch_error("acme/no-such-model", env).startswith("no model 'acme/no-such-model'")
    assert "set HF_TOKEN" in launch_error("acme/gated-llama", env)
    assert "only PyTorch pickles" in launch_error("acme/bin-only", env)
    assert "GPT2LMHeadModel, which minisgl does not serve (supported: " in \
        launch_error("acme/tiny-gpt2", env)
    assert "HF_HUB_OFFLINE is set, and acme/tiny-llama is not in the Hugging Face cache" in \
        launch_error("acme/tiny-llama", hub_env(stub, tmp_path, HF_HUB_OFFLINE="1"))
    stub.stop()
    assert "cannot reach the Hub" in launch_error("acme/tiny-llama", env)


def test_two_services_starting_together_share_one_download(stub: HubStub, tmp_path: Path) -> None:
    code = ("from minisgl_core.plugin.model_lookup import resolve; "
            "print(resolve('acme/tiny-qwen3').path)")
    env = hub_env(stub, tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    (path,) = {out.strip() for out, _ in outs}
    repo = stub.repos["acme/tiny-qwen3"]
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (Path(path) / name).read_bytes() == repo.files[name]
