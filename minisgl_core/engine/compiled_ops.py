"""The engine's own kernels as torch custom ops, so torch.compile traces a forward through them.

A ``Linear`` runs whichever kernel was measured fastest for its row bucket (kernel_choice.py):
oneDNN on pre-packed weights, the native weight-only library through ctypes, int8 GEMMs. None of
these can be lowered by inductor as they are (a packed oneDNN weight is opaque, a ctypes call is
not a torch op), so a compiled graph calls ``minisgl::linear`` with the Linear's handle and the
kernel runs exactly as it does eagerly; only the code between the matmuls is fused. The tensor-
parallel all-reduce and the decode attention (a ctypes kernel where it runs, else SDPA) are ops
of their own for the same reason.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch

_handles = itertools.count()
_thread = threading.local()
_objects: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def new_handle(obj: Any) -> str:
    """A process-wide name for ``obj`` (a Linear, a TensorParallel) that a graph can hold: a
    string, which torch.compile keeps constant (an int that differs between two models'
    traces would be made symbolic)."""
    handle = f"{type(obj).__name__}-{next(_handles)}"
    _objects[handle] = obj
    return handle


def _object(handle: str) -> Any:
    obj = _objects.get(handle)
    if obj is None:
        raise RuntimeError(f"minisgl op handle {handle} refers to an object that is gone")
    return obj


@contextlib.contextmanager
def without_collectives() -> Iterator[None]:
    """On this thread, ``minisgl::all_reduce`` does nothing: a warm-up run that compiles a graph
    must not join a collective that the serving thread's ranks are in the middle of."""
    _thread.skip_collectives = True
    try:
        yield
    finally:
        _thread.skip_collectives = False


@torch.library.custom_op("minisgl::linear", mutates_args=())
def linear(x: torch.Tensor, residual: torch.Tensor | None, handle: str) -> torch.Tensor:
    """``Linear`` ``handle`` applied to ``x [T, in]`` (+ ``residual [T, out]``)."""
    return _object(handle).run_eager(x, residual)


def linear_out_features(handle: str) -> int:
    """The output width of ``Linear`` ``handle`` (for the fake kernels of tracing)."""
    return int(_object(handle).out_features)


@linear.register_fake
def _linear_fake(x: torch.Tensor, residual: torch.Tensor | None, handle: str) -> torch.Tensor:
    return x.new_empty((x.shape[0], linear_out_features(handle)))


@torch.library.custom_op("minisgl::all_reduce", mutates_args=("x",))
def all_reduce(x: torch.Tensor, handle: str) -> None:
    """Sum ``x`` in place over the ranks of tensor-parallel group ``handle``."""
    if not getattr(_thread, "skip_collectives", False):
        _object(handle).all_reduce_eager(x)


@all_reduce.register_fake
def _all_reduce_fake(x: torch.Tensor, handle: str) -> None:
    return None


@torch.library.custom_op("minisgl::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     kv_index: torch.Tensor, mask: torch.Tensor | None,
                     scale: float) -> torch.Tensor:
    """``attention.decode_attention``: whether the native kernel takes the step is decided
    when it runs, not baked into the graph."""
    from minisgl_core.engine.attention import decode_attention as run

    return run(q, k_cache, v_cache, kv_index, mask, scale)


@decode_attention.register_fake
def _decode_attention_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           kv_index: torch.Tensor, mask: torch.Tensor | None,
                           scale: float) -> torch.Tensor:
    return q.new_empty((q.shape[0], q.shape[1] * q.shape[2]))
