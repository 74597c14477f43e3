"""A compiled function's graphs called straight from dynamo's cache entries: the graph whose
guards the arguments pass runs, and a call that no graph's guards pass is left to dynamo."""

from __future__ import annotations

import torch

from minisgl_core.engine.direct_graphs import MISSED, DirectGraphs


def test_the_graph_whose_guards_pass_runs_and_others_are_missed() -> None:
    def scale_add(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
        return x * k + y

    direct = DirectGraphs(scale_add)
    x = torch.arange(6, dtype=torch.float32)
    assert direct.refresh() == 0 and direct(x, x, 2.0) is MISSED  # nothing compiled yet
    compiled = torch.compile(scale_add, backend="eager", dynamic=False)
    y = torch.ones(6)
    compiled(x, y, 2.0)
    compiled(x[:4], y[:4], 2.0)  # a second graph, for 4 elements
    assert direct.refresh() == 2
    assert torch.equal(direct(x, 2 * x, 2.0), scale_add(x, 2 * x, 2.0))
    assert torch.equal(direct(x[2:], y[2:], 2.0), scale_add(x[2:], y[2:], 2.0))
    # another dtype, another length, another constant: no graph's guards pass
    assert direct(x.double(), y.double(), 2.0) is MISSED
    assert direct(x[:5], y[:5], 2.0) is MISSED
    assert direct(x, y, 3.0) is MISSED


def test_a_function_never_compiled_has_no_graphs() -> None:
    def plain(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    direct = DirectGraphs(plain)
    assert direct.refresh() == 0
    assert direct(torch.zeros(2)) is MISSED


def test_guards_that_cannot_read_the_arguments_leave_every_call_to_dynamo() -> None:
    class Unreadable:
        def check(self, local: dict) -> bool:
            raise TypeError("wants a frame")

    direct = DirectGraphs(test_a_function_never_compiled_has_no_graphs)
    direct.entries = [(Unreadable(), lambda: "ran")]
    assert direct() is MISSED and direct.entries == []
