"""The offline benchmark on a tiny model: the engine, whole or split over 2 ranks, against
transformers, every token counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minisgl_core.engine import bench


@pytest.mark.parametrize("tp", [1, 2])
def test_offline_benchmark_counts_every_token(tiny_models: dict[str, Path], tp: int,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        bench.main(str(tiny_models["llama"]), [1, 3], max_tokens=5, json_lines=True,
                   threads=2, repeat=1, tp=tp)
    finally:
        torch.set_num_threads(threads)  # main sets the process's threads; give them back
    out = capsys.readouterr()
    results = [bench.Result(**json.loads(line)) for line in out.out.splitlines()]
    assert [r.batch for r in results] == [1, 3]
    for r in results:
        assert round(r.engine_tok_s * r.engine_s) == round(r.hf_tok_s * r.hf_s) == r.batch * 5
        assert r.ratio == pytest.approx(r.engine_tok_s / r.hf_tok_s)
    assert ("tensor-parallel over 2 ranks" in out.err) == (tp == 2)
