"""How the kernel choice's timings become a choice (choice.py measures them): which kernels are
not worth timing at the prefill buckets, and each layer's layout and per-bucket kernel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from minisgl_core.kernels.matmul import wo_copy
from minisgl_core.kernels.matmul.base import BUCKETS, Kernel, bucket_of

# From the prefill buckets (128 rows and more) on, a kernel more than SKIP_RATIO times the best
# one's time at the bucket below, whose time grew with the rows there, is not timed: its time is
# taken as growing with the rows (what it was, times the rows' ratio). Such a kernel (the
# dot-product kernels, 5-10x the GEMMs at 128 and 512 rows) only falls further behind with more
# rows, and at Qwen3-1.7B's shapes timing it at 512 rows took about a second of the choice's
# budget. A kernel that dequantizes the weight for a GEMM pays that per call: its time hardly
# moves from 8 to 32 rows (1.1-1.2 ms at Qwen3-1.7B's gate|up, 3.0-3.4x AMX's there) and is
# 1.8 ms at 128, not the 4.4 the rows' ratio gave it in about half the choices; in some of those
# the row layout won that layer, 2.4x slower than the panels at one row.
SKIP_RATIO = 3.0
# "grew with the rows": by at least this share of the rows' ratio between the two buckets below
GROWTH_SHARE = 0.5
# The LM head runs on the rows that get a next token, one a request (max_running_requests, 128
# by default), never on a prefill chunk's 512: its layout is judged on the buckets up to 128
# rows. Counted at 512 too, the row layout (int8-wo, then a bf16 GEMM) won the default model's
# head on Zen 4 by 0.5% of the sum (12.4 against 20.1 ms at 512 rows), where the panels' split
# kernel is 1.1-1.4x faster at every row count a step gives it.
HEAD_ROWS = 128


def without_hopeless(timed: list[Kernel], times: dict[str, list[float]],
                     b: int) -> list[Kernel]:
    """``timed`` less the kernels over SKIP_RATIO times the best at bucket ``b - 1`` (``b`` >= 2)
    whose time grew with the rows from ``b - 2``; their time at ``b`` is set to theirs at
    ``b - 1`` scaled by the rows."""
    inf = float("inf")
    before = [times[k.name][b - 1] for k in timed if times[k.name][b - 1] != inf]
    limit = SKIP_RATIO * min(before, default=inf)
    growth = GROWTH_SHARE * BUCKETS[b - 1] / BUCKETS[b - 2]
    keep = []
    for k in timed:
        was, earlier = times[k.name][b - 1], times[k.name][b - 2]
        if limit < was < inf and was >= growth * earlier:  # earlier inf: not measured, timed
            times[k.name][b] = was * BUCKETS[b] / BUCKETS[b - 1]
        else:
            keep.append(k)
    return keep


def pick(pool: Sequence[Kernel], times: Mapping[str, Sequence[float]],
         max_rows: int | None = None) -> tuple[Kernel, ...]:
    """One layout (least total slowdown against each bucket's best, over the buckets up to
    ``max_rows``, None: all; one keeping a copy of the weight only where that is COPY_MIN_GAIN
    below the best without), then per bucket its fastest kernel; ties go to the earlier
    candidate. Unmeasured buckets get the first candidate."""
    n = len(BUCKETS)
    counted = n if max_rows is None else bucket_of(max_rows) + 1
    serving = [[k for k in pool if k.serves(BUCKETS[b])] for b in range(n)]
    if any(times[k.name][b] == float("inf") for b in range(n) for k in serving[b]):
        return (pool[0],) * n
    best = [min(times[k.name][b] for k in serving[b]) for b in range(n)]
    layouts = [layout for layout in dict.fromkeys(k.layout for k in pool)
               if all(any(k.layout == layout for k in serving[b]) for b in range(n))]

    def in_layout(layout: str, b: int) -> Kernel:
        return min((k for k in serving[b] if k.layout == layout), key=lambda k: times[k.name][b])

    def loss(layout: str) -> float:
        return sum(times[in_layout(layout, b).name][b] / best[b] for b in range(counted))

    layout = min(layouts, key=loss)
    plain = [lay for lay in layouts if not any(k.copies for k in pool if k.layout == lay)]
    if plain and layout not in plain:
        best_plain = min(plain, key=loss)
        if loss(layout) > loss(best_plain) * (1 - wo_copy.COPY_MIN_GAIN):
            layout = best_plain
    return tuple(in_layout(layout, b) for b in range(n))
