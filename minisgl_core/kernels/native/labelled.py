"""A native call under a profiler label: torch's profiler cannot see into a ctypes call, so
each is named while a profiler records, and only then (outside one the label is still a
dispatcher call, tens of microseconds once a step's weights have left the caches:
docs/design/kernels.md, 30)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def call(name: str, kernel: Callable[..., int], *args: object) -> int:
    """``kernel(*args)``, under the profiler label ``name`` while a profiler records."""
    if torch.autograd._profiler_enabled():
        with torch.profiler.record_function(name):
            return kernel(*args)
    return kernel(*args)
