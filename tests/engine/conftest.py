"""Fixtures for the engine tests: tiny random models (built once) and their transformers twins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.engine.request import StepOutput
from minisgl_core.plugin.model_lookup import resolve
from minisgl_core.testing.tiny import ARCHES, make_tiny_model


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: make_tiny_model(root / arch, arch, seed=i) for i, arch in enumerate(ARCHES)}


@pytest.fixture(scope="session")
def make_engine(tiny_models: dict[str, Path]) -> Callable[..., Engine]:
    def make(arch: str = "llama", **options: Any) -> Engine:
        options.setdefault("num_threads", 1)
        options.setdefault("dtype", "float32")  # the references these tests compare with
        resolved = resolve(str(tiny_models[arch]))
        return Engine(EngineConfig(model=resolved.path, **options), resolved.model_class)

    return make


@pytest.fixture(scope="session")
def hf_greedy(tiny_models: dict[str, Path]) -> Callable[[str, Sequence[int], int], list[int]]:
    """transformers' greedy continuation of one prompt (no batching, no padding)."""
    import torch
    from transformers import AutoModelForCausalLM

    cache: dict[str, Any] = {}

    def run(arch: str, prompt: Sequence[int], n: int) -> list[int]:
        if arch not in cache:
            cache[arch] = AutoModelForCausalLM.from_pretrained(tiny_models[arch],
                                                               dtype=torch.float32).eval()
        ids = torch.tensor([list(prompt)])
        with torch.inference_mode():
            out = cache[arch].generate(ids, attention_mask=torch.ones_like(ids),
                                       max_new_tokens=n, do_sample=False)
        return out[0, len(prompt):].tolist()  # type: ignore[no-any-return]

    return run


def _drain(engine: Engine, max_steps: int = 10_000) -> dict[str, list[StepOutput]]:
    outs: dict[str, list[StepOutput]] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            return outs
        for o in engine.step():
            outs.setdefault(o.request_id, []).append(o)
    raise AssertionError("engine did not go idle")


@pytest.fixture(scope="session")
def drain() -> Callable[..., dict[str, list[StepOutput]]]:
    """Step an engine until idle; every StepOutput grouped by request id."""
    return _drain


@pytest.fixture(scope="session")
def tokens_of() -> Callable[[list[StepOutput]], list[int]]:
    """All token ids of a request's StepOutputs, in order."""
    return lambda outs: [t for o in outs for t in o.token_ids]
