"""A step's row layout: decode rows, then the short prefill chunks folded in as decode rows of
their own positions, then the extend chunks; the rows sampled follow the same order."""

from __future__ import annotations

import torch

from minisgl_core.engine.batching import ScheduledBatch
from minisgl_core.engine.kv_cache import KVPool
from minisgl_core.engine.request import Request
from minisgl_core.engine.step_layout import FOLD_BYTES, fold_keys, layout
from minisgl_core.wire.schema import SamplingParams

SP = SamplingParams(max_tokens=8)


def _req(rid: str, prompt: list[int], cached: int = 0, output: tuple[int, ...] = (),
         prompt_lp: object = None) -> Request:
    return Request(rid, prompt, SP, max_tokens=8, output_ids=list(output), num_cached=cached,
                   pages=[10 + len(rid), 20 + len(rid)], prompt_lp=prompt_lp)


def test_short_chunks_become_decode_rows_after_the_decodes_and_long_ones_stay_extends() -> None:
    dec = _req("d", [1, 2, 3], cached=3, output=(9,))  # decoding: its 4th token is row 0
    short = _req("s", [4, 5, 6])  # 3 new tokens read 1 + 2 + 3 = 6 keys
    long = _req("long", list(range(100, 140)))  # 40 new tokens read 820 keys
    part = _req("p", list(range(50, 60)), cached=4)  # 3 of its 6 remaining tokens this step
    batch = ScheduledBatch(decode=[dec], prefill=[(long, 40), (short, 3), (part, 3)])
    lay = layout(batch, [], fold_keys=100)
    # decode, then short and part folded (in their scheduled order), then the long extend
    assert lay.ids == [9, 4, 5, 6, 54, 55, 56, *range(100, 140)]
    assert lay.decode == [(dec.pages, 4), (short.pages, 1), (short.pages, 2), (short.pages, 3),
                          (part.pages, 5), (part.pages, 6), (part.pages, 7)]
    assert lay.prefill == [(long.pages, 0, 40)]
    # sampled: the decode, the short prompt's last row, the long prompt's last row; not part
    assert lay.rows == [0, 3, 46] and lay.to_sample == [dec, short, long]


def test_nothing_folds_without_a_budget_or_when_prompt_logprobs_are_asked() -> None:
    short = _req("s", [4, 5, 6])
    asked = _req("a", [7, 8], prompt_lp=object())
    batch = ScheduledBatch(prefill=[(short, 3)])
    assert layout(batch, [], fold_keys=0).prefill == [(short.pages, 0, 3)]
    assert layout(batch, [], fold_keys=5).decode == []  # 6 keys: over a budget of 5
    assert len(layout(batch, [], fold_keys=6).decode) == 3
    again = _req("t", [4, 5, 6])  # the budget is the step's: 6 keys fold one of the two
    lay = layout(ScheduledBatch(prefill=[(short, 3), (again, 3)]), [], fold_keys=11)
    assert len(lay.decode) == 3 and lay.prefill == [(again.pages, 0, 3)]
    lay = layout(ScheduledBatch(prefill=[(asked, 2)]), [], fold_keys=1000)
    assert lay.decode == [] and lay.prefill == [(asked.pages, 0, 2)] and len(lay.chunks) == 1


def test_the_budget_is_in_kv_bytes_so_a_larger_model_folds_fewer_keys() -> None:
    smol = KVPool.bytes_per_token(30, 3, 64, torch.bfloat16)  # the default model: 23,040 bytes
    qwen = KVPool.bytes_per_token(28, 8, 128, torch.float32)  # Qwen3-1.7B's shapes in fp32
    assert fold_keys(smol) == FOLD_BYTES // 23_040 > 4000
    assert fold_keys(qwen) < fold_keys(smol) // 9  # ~10x the bytes a key
