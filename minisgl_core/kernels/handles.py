"""Process-wide names for the objects a compiled graph or the C++ operators call back into (a
``Linear``, a tensor-parallel group): a graph holds the string, the op looks the object up."""

from __future__ import annotations

import itertools
import weakref
from typing import Any

_handles = itertools.count()
_objects: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def new_handle(obj: Any) -> str:
    """A process-wide name for ``obj`` (a Linear, a TensorParallel) that a graph can hold: a
    string, which torch.compile keeps constant (an int that differs between two models'
    traces would be made symbolic)."""
    handle = f"{type(obj).__name__}-{next(_handles)}"
    _objects[handle] = obj
    return handle


def object_of(handle: str) -> Any:
    """The object ``handle`` names; RuntimeError once it is gone."""
    obj = _objects.get(handle)
    if obj is None:
        raise RuntimeError(f"minisgl op handle {handle} refers to an object that is gone")
    return obj


def linear_out_features(handle: str) -> int:
    """The output width of ``Linear`` ``handle`` (for the fake kernels of tracing)."""
    return int(object_of(handle).out_features)


