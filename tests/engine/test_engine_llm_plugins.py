"""Offline LLM finds its model through the plugins, as the service does, on every tp rank."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from minisgl_core import LLM, SamplingParams
from minisgl_core.plugin.model_lookup import ModelNotFoundError

PLUGIN = '''
"""A plugin with its own model source ("acme:<name>") and architecture name."""
from minisgl_core import hookimpl

MODELS = {models!r}

@hookimpl
def minisgl_resolve_model(spec):
    return MODELS.get(spec.removeprefix("acme:")) if spec and spec.startswith("acme:") else None

@hookimpl
def minisgl_register_models(register):
    register("AcmeLlamaForCausalLM", "minisgl_core.engine.models.llama:LlamaForCausalLM")
'''


@pytest.fixture
def acme(tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A copy of the tiny Llama under a plugin's architecture name, and the plugin's module."""
    import shutil

    model = tmp_path / "acme-tiny"
    shutil.copytree(tiny_models["llama"], model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["architectures"] = ["AcmeLlamaForCausalLM"]
    (model / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "acme_models.py").write_text(textwrap.dedent(PLUGIN.format(
        models={"tiny": str(model)})))
    monkeypatch.syspath_prepend(str(tmp_path))  # here, and for the tp-worker subprocesses:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "acme_models"


def test_a_plugin_model_and_resolver_work_offline(acme: str, tiny_models) -> None:
    greedy = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    with pytest.raises(ModelNotFoundError, match="no plugin resolves it"):
        LLM("acme:tiny", num_threads=1)
    (want,) = LLM(str(tiny_models["llama"]), num_threads=1).generate([[5, 6, 7]], greedy)
    (got,) = LLM("acme:tiny", plugins=[acme], num_threads=1).generate([[5, 6, 7]], greedy)
    assert got.token_ids == want.token_ids and len(got.token_ids) == 8


def test_every_tp_rank_sees_the_plugin(acme: str, tiny_models) -> None:
    greedy = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    (want,) = LLM(str(tiny_models["llama"]), num_threads=1).generate([[5, 6, 7]], greedy)
    with LLM("acme:tiny", plugins=[acme], tp=2, num_threads=1) as llm:
        (got,) = llm.generate([[5, 6, 7]], greedy)
    assert got.token_ids == want.token_ids
