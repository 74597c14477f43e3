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


def test_llamacpp_way_scores_the_second_half_of_each_chunk(tiny_models: dict[str, Path]
                                                            ) -> None:
    from transformers import AutoModelForCausalLM

    path = tiny_models["llama"]
    engine = Engine(EngineConfig(model=str(path), num_threads=1, cache="naive"),
                    resolve(str(path)).model_class)
    ids = list(engine.tokenizer.encode(quality.corpus_text(), add_special_tokens=False))[:100]
    got = quality.llamacpp_way_perplexity(engine, ids, n_ctx=48)  # 2 chunks, 4 tokens dropped
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    nll, count = 0.0, 0
    with torch.inference_mode():
        for chunk in (ids[:48], ids[48:96]):  # each on its own: no context from the one before
            logp = torch.log_softmax(hf(torch.tensor([chunk])).logits[0].float(), -1)
            for i in range(24, 47):  # positions n_ctx/2 .. n_ctx-2 predict the next token
                nll -= float(logp[i, chunk[i + 1]])
                count += 1
    assert got == pytest.approx(math.exp(nll / count), rel=1e-4)
    engine.check_idle_invariant()


def test_quality_report_measures_bf16_and_bf16_int4_beside_fp32(tiny_models: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        quality.main(str(tiny_models["llama"]), ["int4"], tokens=100, max_tokens=4,
                     json_lines=True, threads=1, bf16=True)
    finally:
        torch.set_num_threads(threads)
    rows = [quality.Quality(**json.loads(line)) for line in capsys.readouterr().out.splitlines()]
    assert [r.system for r in rows] == ["fp32", "bf16", "int4", "bf16-int4"]
    fp32, bf16, int4, bf16_int4 = rows
    # int4 with bf16 activations: its own kernels, near int4's with fp32 ones (a random tiny
    # model's perplexity, ~1e5, moves by several percent with bf16 rounding alone)
    assert bf16_int4.perplexity == pytest.approx(int4.perplexity, rel=0.2)
    assert bf16_int4.perplexity != int4.perplexity
    # bf16 weights and activations: close to fp32's on the same tokens, and not equal to it
    assert bf16.perplexity == pytest.approx(fp32.perplexity, rel=0.05)
    assert bf16.perplexity != fp32.perplexity
    assert bf16.perplexity_llamacpp is None  # only with --peer llamacpp


def _llamacpp_built() -> bool:
    from minisgl_core.bench.peers import PeerNotInstalledError, peer_venv

    try:
        peer_venv("llamacpp", program="llama-perplexity")
    except PeerNotInstalledError:
        return False
    return True


@pytest.mark.model
@pytest.mark.skipif(not _llamacpp_built(), reason="no llama.cpp build (make bench-peers "
                                                  "PEERS=llamacpp)")
def test_llamacpp_measures_the_same_quantity_as_we_do() -> None:
    from minisgl_core.store.default_model import ensure_default_model

    path = ensure_default_model()
    engine = Engine(EngineConfig(model=str(path), num_threads=2, cache="naive"),
                    resolve(str(path)).model_class)
    ids = list(engine.tokenizer.encode(quality.corpus_text(), add_special_tokens=False))[:1024]
    ours = quality.llamacpp_way_perplexity(engine, ids)
    (q4, q8) = quality._llamacpp_rows(engine.tokenizer.decode(ids), len(ids), 2)
    # our weights are the Q4_1 file's, dequantized to fp32: the same weights as llama.cpp's
    # Q4_1 (which rounds its activations to 8 bits); its Q8_0, written from them, rounds again
    assert q4.perplexity == pytest.approx(ours, rel=0.01)
    assert q8.perplexity == pytest.approx(ours, rel=0.02)
