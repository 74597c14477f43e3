"""Hub ids resolved through huggingface_hub against a local stand-in for the Hub."""

from __future__ import annotations

from pathlib import Path

import pytest

from minisgl_core.plugin.loading import build_manager, collect
from minisgl_core.plugin.model_lookup import ModelNotFoundError, resolve_model
from minisgl_core.store import hub as store_hub
from minisgl_core.testing.hub_stub import HubStub

from .conftest import GATED_TOKEN

ENGINE_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json"}


def resolve(spec: str, **kwargs: str) -> Path:
    pm = build_manager(autoload=False)
    names = collect(pm).models.names()
    return Path(resolve_model(pm, spec, architectures=names, **kwargs))


def refusal(spec: str, **kwargs: str) -> str:
    with pytest.raises(ModelNotFoundError) as info:
        resolve(spec, **kwargs)
    message = str(info.value)
    assert "\n" not in message, f"not one line: {message!r}"
    return message


def test_a_hub_id_is_fetched_into_the_hf_cache_with_only_the_engine_files(
        hub: HubStub, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = resolve("acme/tiny-qwen3")
    repo = hub.repos["acme/tiny-qwen3"]
    snapshots = tmp_path / "hf" / "hub" / "models--acme--tiny-qwen3" / "snapshots"
    assert path == snapshots / repo.commit
    assert {p.name for p in path.iterdir()} == ENGINE_FILES
    # no README, onnx/ or .bin
    assert {f.split("/", 2)[2] for f in hub.downloads()} == ENGINE_FILES
    for name in ENGINE_FILES:
        assert (path / name).read_bytes() == repo.files[name]
    assert "Fetching 5 files: 100%" in capfd.readouterr().err  # the progress bar
    # asked again in this process: no request at all (once per service, not once per process)
    before = len(hub.requests)
    assert resolve("acme/tiny-qwen3") == path
    assert len(hub.requests) == before


def test_the_cache_serves_when_the_hub_is_gone_or_offline(
        hub: HubStub, monkeypatch: pytest.MonkeyPatch) -> None:
    path = resolve("acme/tiny-llama")
    hub.stop()
    monkeypatch.setattr(store_hub, "_fetched", {})  # a new process
    assert resolve("acme/tiny-llama") == path
    message = refusal("acme/tiny-qwen3")
    assert message.startswith("cannot reach the Hub at http://127.0.0.1:")
    assert "acme/tiny-qwen3 is not in the Hugging Face cache" in message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(store_hub, "_fetched", {})
    assert resolve("acme/tiny-llama") == path
    assert resolve("acme/tiny-llama", revision="main") == path
    assert "HF_HUB_OFFLINE is set, and acme/tiny-qwen3 is not in the Hugging Face cache" in \
        refusal("acme/tiny-qwen3")


def test_offline_mode_makes_no_request(hub: HubStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    refusal("acme/tiny-llama")
    assert hub.requests == []


def test_unknown_repo_and_unknown_revision(hub: HubStub) -> None:
    assert refusal("acme/no-such-model") == (
        f"no model 'acme/no-such-model' on the Hub ({hub.url}): check the name, or set HF_TOKEN "
        f"if it is private")
    assert refusal("acme/tiny-llama", revision="v9") == (
        f"acme/tiny-llama has no revision 'v9' on the Hub ({hub.url})")
    commit = hub.repos["acme/tiny-llama"].commit
    assert resolve("acme/tiny-llama", revision=commit).name == commit


def test_a_gated_repo_needs_a_token_with_access(hub: HubStub,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert refusal("acme/gated-llama") == (
        f"acme/gated-llama is gated: accept its terms at {hub.url}/acme/gated-llama, then set "
        f"HF_TOKEN to a token of that account")
    monkeypatch.setenv("HF_TOKEN", "hf_a_token_without_access")
    assert "the token in HF_TOKEN has no access yet" in refusal("acme/gated-llama")
    monkeypatch.setenv("HF_TOKEN", GATED_TOKEN)
    assert (resolve("acme/gated-llama") / "model.safetensors").is_file()


def test_weights_minisgl_cannot_load_are_refused_before_downloading_them(hub: HubStub) -> None:
    assert refusal("acme/bin-only") == (
        "acme/bin-only has no safetensors weights, only PyTorch pickles (pytorch_model.bin); "
        "minisgl loads safetensors only (a revision or copy of the repo with *.safetensors works)")
    message = refusal("acme/tiny-gpt2")
    assert message.startswith("acme/tiny-gpt2 is a GPT2LMHeadModel, which minisgl does not "
                              "serve (supported: Gemma3ForCausalLM, LlamaForCausalLM, ")
    assert [f for f in hub.downloads() if not f.endswith("/config.json")] == []


def test_a_local_path_wins_over_a_hub_id(hub: HubStub, tiny_dirs: dict[str, Path],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tiny_dirs["llama"].parent.parent)
    local = f"{tiny_dirs['llama'].parent.name}/llama"  # ORG/NAME-shaped, and a directory here
    assert resolve(local) == tiny_dirs["llama"].resolve()
    assert hub.requests == []
    assert "--revision is for Hub ids" in refusal(local, revision="main")


def test_llm_takes_a_hub_id(hub: HubStub, tiny_dirs: dict[str, Path]) -> None:
    from minisgl_core import LLM, SamplingParams

    from .test_store_hub_launch import PROMPT, transformers_greedy

    llm = LLM("acme/tiny-llama", num_threads=1, revision="main")
    assert llm.engine.model_name == "acme/tiny-llama"
    (out,) = llm.generate([PROMPT], SamplingParams(max_tokens=12, temperature=0))
    assert out.token_ids == transformers_greedy(tiny_dirs["llama"], PROMPT, 12)
