"""Running a compiled function's graphs without dynamo's wrapper around each call.

``torch._dynamo.run(fn)(*args)`` runs the first of ``fn``'s graphs whose guards pass, from inside
a wrapper of some forty Python lines (the eval-frame callback and stance, dispatch-key and
functorch state saved and restored, the recompile settings). A decode step calls it after its
weights' pass has left little of that Python in the caches: 50-70 us of a one-request step on
the default model on the 2-core AMD EPYC Zen 5, 2-3% of its forward (design/kernels.md, 12).

Dynamo keeps each graph as a cache entry on the function's code object: the transformed code
(which calls the graph) and its guards. ``DirectGraphs`` checks each entry's guards against the
arguments, as dynamo does, and calls the transformed code of the first that passes. With no
entry passing, or no entries or guards it can read (another torch), it says so and the caller
takes dynamo's path, which runs the function eagerly where no graph fits, as before.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MISSED = object()  # no graph's guards passed: run dynamo's path


class DirectGraphs:
    """``fn``'s compiled graphs, called straight from their cache entries."""

    def __init__(self, fn: types.FunctionType) -> None:
        code = fn.__code__
        self.fn = fn
        self.names = code.co_varnames[:code.co_argcount]  # the guards read the frame's locals
        self.entries: list[tuple[Any, Callable[..., Any]]] = []

    def refresh(self) -> int:
        """Read the graphs dynamo holds for ``fn`` now (after each compile); how many."""
        try:
            from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

            self.entries = [(e.guard_manager,
                             types.FunctionType(e.code, self.fn.__globals__, self.fn.__name__))
                            for e in _debug_get_cache_entry_list(self.fn.__code__)]
        except (ImportError, AttributeError, TypeError) as exc:  # a torch that keeps them else
            log.info("compiled graphs called through dynamo: %s", exc)
            self.entries = []
        return len(self.entries)

    def __call__(self, *args: Any) -> Any:
        """The first graph whose guards ``args`` (every argument, in order) pass, run on them;
        ``MISSED`` when none does."""
        local = dict(zip(self.names, args, strict=True))
        for guards, code in self.entries:
            try:
                passed = guards.check(local)
            except (TypeError, AttributeError) as exc:  # guards that read frames otherwise
                log.warning("compiled graphs called through dynamo from now on: %s", exc)
                self.entries = []
                return MISSED
            if passed:
                return code(*args)
        return MISSED
