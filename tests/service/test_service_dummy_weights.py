"""``minisgl launch --load-format dummy``: a model directory without weights serves a completion."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service


@pytest.fixture(scope="module")
def dummy(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    config_only = tmp_path_factory.mktemp("config-only") / "tiny-llama"
    config_only.mkdir()
    for f in Path(tiny_model).iterdir():
        if f.suffix != ".safetensors":  # config.json and the tokenizer, no weights
            shutil.copy(f, config_only / f.name)
    svc = launch_service(str(config_only), args=["--load-format", "dummy", "--dtype", "float32"],
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


def test_random_weights_answer_a_completion(dummy: RunningService) -> None:
    answer = httpx.post(f"{dummy.url}/v1/completions", timeout=60, json={
        "model": dummy.model_name(), "prompt": "hello", "max_tokens": 4, "temperature": 0,
        "ignore_eos": True})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 4
    assert "are RANDOM (--load-format dummy)" in dummy.log()
