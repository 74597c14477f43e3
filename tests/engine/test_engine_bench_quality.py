"""`minisgl bench quality` on a tiny model: the perplexity is transformers' and the report holds
fp32 and int8 side by side."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from minisgl_core.bench import quality
from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.plugin.model_lookup import resolve


def test_corpus_is_the_sorted_pydoc_topics() -> None:
    from pydoc_data.topics import topics

    text = quality.corpus_text()
    first = sorted(topics)[0]
    assert text.startswith(topics[first]) and len(text) > 100_000


def test_perplexity_equals_transformers_over_several_chunks(tiny_models: dict[str, Path],
                                                            monkeypatch) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(quality, "CHUNK", 48)  # three chunks over the paged KV cache
    path = tiny_models["llama"]
    engine = Engine(EngineConfig(model=str(path), num_threads=1, cache="naive"),
                    resolve(str(path)).model_class)
    ids = list(engine.tokenizer.encode(quality.corpus_text(), add_special_tokens=False))[:130]
    got = quality.perplexity(engine, ids)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.inference_mode():
        loss = hf(torch.tensor([ids]), labels=torch.tensor([ids])).loss
    assert got == pytest.approx(math.exp(float(loss)), rel=1e-4)
    engine.check_idle_invariant()  # the pages went back


def test_quality_report_puts_int8_next_to_fp32(tiny_models: dict[str, Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        code = quality.main(str(tiny_models["llama"]), ["int8"], tokens=100, max_tokens=4,
                            json_lines=True, threads=1)
    finally:
        torch.set_num_threads(threads)
    rows = [quality.Quality(**json.loads(line)) for line in capsys.readouterr().out.splitlines()]
    assert [r.system for r in rows] == ["fp32", "int8"]
    fp32, int8 = rows
    assert fp32.agreement == 1.0 and fp32.chats_equal == fp32.chats == 16
    assert 0.0 <= int8.agreement <= 1.0 and fp32.tokens == int8.tokens == 100
    assert math.isfinite(int8.perplexity) and int8.perplexity > 1.0
    # a random tiny model knows no capitals: the gate fails, and says so with exit code 1
    assert code == (0 if fp32.paris and int8.paris and
                    int8.perplexity <= 1.03 * fp32.perplexity else 1)
