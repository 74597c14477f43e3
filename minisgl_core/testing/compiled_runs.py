"""Which compiled graphs a piece of work ran, and how often: a step whose guards no graph
passes runs eagerly and is not counted (tests of the compiled decode step)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
# the event inductor records around each call of a compiled graph, named by the graph's key
# (dynamo's own "Torch-Compiled Region" is left out when a graph is called straight from its
# cache entry: engine/direct_graphs.py)
GRAPH_CALL = "## Call CompiledFxGraph"


def compiled_runs(fn: Callable[[], T]) -> tuple[dict[str, int], T]:
    """``fn()`` under torch's profiler: each compiled graph it ran, how often, and its result."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    return {e.key: e.count for e in prof.key_averages() if e.key.startswith(GRAPH_CALL)}, out
