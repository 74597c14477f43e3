"""The rows of ``minisgl bench transport``: one per case, ratios to zmq (ipc, sync) at the
same size, as a markdown table, and the medians over repeated runs."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from minisgl_core.bench.transport_peer import Measured

REFERENCE = "zmq"


@dataclass(frozen=True)
class Row:
    """One JSON line / table row."""

    transport: str
    peer: str  # "process" or "thread"
    mode: str  # "sync" or "async"
    size: int
    p50_us: float
    p99_us: float
    round_trips: int
    msgs_per_s: float
    mb_per_s: float
    p50_vs_zmq: float | None
    thr_vs_zmq: float | None
    endpoints: str = "ipc"  # "ipc", "tcp" or "tcp+auth" (loopback tcp with keys)


def make_row(name: str, peer: str, mode: str, size: int, m: Measured,
             ref: dict[int, Measured], endpoints: str = "ipc") -> Row:
    """The row of one measured case, its ratios to ``ref`` (zmq's figures by size) if any."""
    base = ref.get(size)
    p50_ratio = m.p50_us / base.p50_us if base and base.p50_us else None
    thr_ratio = m.msgs_per_s / base.msgs_per_s if base and base.msgs_per_s else None
    return Row(name, peer, mode, size, round(m.p50_us, 1), round(m.p99_us, 1), m.round_trips,
               round(m.msgs_per_s), round(m.mb_per_s, 1),
               None if p50_ratio is None else round(p50_ratio, 2),
               None if thr_ratio is None else round(thr_ratio, 3), endpoints)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else (
        f"{n >> 10} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B")


def _ratio(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(rows: Sequence[Row]) -> str:
    """A markdown table of ``rows`` (latency in microseconds, one-way)."""
    head = ("| transport | endpoints | peer | mode | size | p50 us | p99 us | round trips | msg/s "
            "| MB/s | p50 vs zmq | msg/s vs zmq |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r.transport} | {r.endpoints} | {r.peer} | {r.mode} | {_size(r.size)} "
                     f"| {r.p50_us:,.1f} "
                     f"| {r.p99_us:,.1f} | {r.round_trips} | {r.msgs_per_s:,.0f} "
                     f"| {r.mb_per_s:,.1f} | {_ratio(r.p50_vs_zmq, '.2f')}x "
                     f"| {_ratio(r.thr_vs_zmq, '.3f')} |")
    return "\n".join(lines)


def median_rows(runs: Sequence[Sequence[Row]]) -> list[Row]:
    """Per case, the median of each figure over ``runs``; ratios recomputed from the medians."""
    cases: dict[tuple[str, str, str, int], list[Row]] = {}
    for rows in runs:
        for r in rows:
            cases.setdefault((r.transport, r.endpoints, r.mode, r.size), []).append(r)
    med: dict[tuple[str, str, str, int], Measured] = {
        key: Measured(statistics.median(r.p50_us for r in rs),
                      statistics.median(r.p99_us for r in rs),
                      int(statistics.median(r.round_trips for r in rs)),
                      statistics.median(r.msgs_per_s for r in rs),
                      statistics.median(r.mb_per_s for r in rs))
        for key, rs in cases.items()}
    ref = {size: m for (name, where, mode, size), m in med.items()
           if (name, where, mode) == (REFERENCE, "ipc", "sync")}
    return [make_row(name, rs[0].peer, mode, size, med[(name, where, mode, size)], ref, where)
            for (name, where, mode, size), rs in cases.items()]

