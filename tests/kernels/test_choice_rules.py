"""The choice's rules on given timings: one layout per layer, judged where the layer runs."""

from __future__ import annotations

from minisgl_core.kernels import BUCKETS, Kernel
from minisgl_core.kernels.matmul.choice_rules import HEAD_ROWS, pick


def _kernel(name: str, layout: str) -> Kernel:
    return type(name, (Kernel,), {"name": name, "layout": layout})()


ROWS_DOT, ROWS_GEMM = _kernel("dot", "rows"), _kernel("gemm", "rows")
PANELS = _kernel("panels", "panels")
POOL = (ROWS_DOT, ROWS_GEMM, PANELS)
# ms at 1, 8, 32, 128 and 512 rows, the default model's LM head on Zen 4 (bf16 inputs): the
# panels fastest up to 32 rows, the row layout's GEMM at 128 and far ahead at 512
TIMES = {"dot": [0.239, 0.576, 2.96, 11.3, 45.1], "gemm": [9.9, 0.754, 1.31, 3.41, 12.4],
         "panels": [0.211, 0.408, 1.07, 4.03, 20.1]}


def test_the_buckets_are_the_ones_the_times_are_for() -> None:
    assert list(BUCKETS) == [1, 8, 32, 128, 512] and HEAD_ROWS == 128


def test_counted_at_every_bucket_the_512_rows_decide_for_the_row_layout() -> None:
    assert pick(POOL, TIMES) == (ROWS_DOT, ROWS_DOT, ROWS_GEMM, ROWS_GEMM, ROWS_GEMM)


def test_up_to_the_head_s_rows_the_panels_win_and_stay_one_layout() -> None:
    assert pick(POOL, TIMES, HEAD_ROWS) == (PANELS,) * len(BUCKETS)


def test_a_layout_faster_everywhere_wins_whatever_is_counted() -> None:
    fast_rows = {**TIMES, "dot": [0.1] * 5, "gemm": [0.1] * 5}
    assert pick(POOL, fast_rows, 1) == (ROWS_DOT,) * len(BUCKETS)
    assert pick(POOL, fast_rows) == (ROWS_DOT,) * len(BUCKETS)
