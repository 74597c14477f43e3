"""Which compiled graphs a piece of work ran, and how often: a step whose guards no graph
passes runs eagerly and is not counted (tests of the compiled decode step)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def compiled_runs(fn: Callable[[], T]) -> tuple[dict[str, int], T]:
    """``fn()`` under torch's profiler: each compiled graph it ran, how often, and its result."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    return {e.key: e.count for e in prof.key_averages()
            if e.key.startswith("Torch-Compiled Region")}, out
