"""Which of dynamo's guards a compiled decode step keeps, and a code object of its own per engine.

Dynamo guards a graph on everything the traced code read: on the default model 1,453 checks a
step (every weight's dtype and shape, each layer's attributes and methods, the kernels' module
globals), 0.3-0.4 ms of a 3 ms step on a 2-core AMD EPYC Zen 5. The model, its KV pool and
workspace never change once the engine is built, so a decode graph keeps only the guards on the
step's own inputs (the token ids, positions, slots, key index and mask: their dtypes, sizes and
the symbolic sizes' ranges) and on torch's global state: 14. Those still decide which graph a
step runs, or that it runs eagerly, exactly as before.

Without guards on the model, one engine's graphs would pass for another engine's model in the
same process (tests, benchmarks); dynamo keeps graphs per code object, so each engine compiles
its own copy of the step's function (``own_copy``).
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Sequence
from typing import Any

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def keep_input_guards(inputs: Sequence[str]) -> Callable[[list[Any]], list[bool]]:
    """A ``guard_filter_fn`` for torch.compile: keeps a guard on torch's global state (no name)
    or on an attribute or size of the step's own arguments named in ``inputs``."""
    names = frozenset(inputs)

    def keep(entries: list[Any]) -> list[bool]:
        kept = []
        for entry in entries:
            root = _IDENTIFIER.match(entry.name)
            kept.append(not entry.name or (root is not None and root.group() in names))
        return kept

    return keep


def own_copy(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` with a code object of its own, so that dynamo's graphs of it are its alone."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__doc__ = fn.__doc__
    return copy
