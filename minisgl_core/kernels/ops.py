"""The engine's own kernels as torch custom ops, so torch.compile traces a forward through them.

A ``Linear`` runs whichever kernel was measured fastest for its row bucket (matmul/choice.py):
oneDNN on pre-packed weights, the native weight-only library through ctypes, int8 GEMMs. None of
these can be lowered by inductor as they are (a packed oneDNN weight is opaque, a ctypes call is
not a torch op), so a compiled graph calls ``minisgl::linear`` with the Linear's handle and the
kernel runs exactly as it does eagerly; only the code between the matmuls is fused. The tensor-
parallel all-reduce and the decode attention (a ctypes kernel where it runs, else SDPA) are ops
of their own for the same reason.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from minisgl_core.kernels import attention, handles
from minisgl_core.kernels.native import ops as native_ops

_thread = threading.local()


def new_handle(obj: object) -> str:
    """``handles.new_handle``, asked for here so that the ops a handle is for are registered
    (at this module's import) before anything can call them."""
    return handles.new_handle(obj)


@contextlib.contextmanager
def without_collectives() -> Iterator[None]:
    """On this thread, ``minisgl::all_reduce`` does nothing: a warm-up run that compiles a graph
    must not join a collective that the serving thread's ranks are in the middle of."""
    _thread.skip_collectives = True
    try:
        yield
    finally:
        _thread.skip_collectives = False


@contextlib.contextmanager
def python_ops_in_graphs() -> Iterator[None]:
    """On this thread, a traced step calls the kernels through the Python custom ops below, not
    the C++ operators. Tensor-parallel graphs need it: with the C++ operators in a graph beside
    the in-place all-reduce, inductor's AVX-512 code corrupted the heap on an AVX-512 host
    without AMX (``free(): invalid pointer`` at the first step; not with its AVX2 code, not
    with one rank, not eagerly)."""
    _thread.python_ops = True
    try:
        yield
    finally:
        _thread.python_ops = False


def native_in_graph() -> bool:
    """Whether a step being traced on this thread may call the C++ operators."""
    return not getattr(_thread, "python_ops", False)


@torch.library.custom_op("minisgl::linear", mutates_args=())
def linear(x: torch.Tensor, residual: torch.Tensor | None, handle: str) -> torch.Tensor:
    """``Linear`` ``handle`` applied to ``x [T, in]`` (+ ``residual [T, out]``)."""
    return handles.object_of(handle).run_eager(x, residual)


@linear.register_fake
def _linear_fake(x: torch.Tensor, residual: torch.Tensor | None, handle: str) -> torch.Tensor:
    return x.new_empty((x.shape[0], handles.linear_out_features(handle)))


@torch.library.custom_op("minisgl::all_reduce", mutates_args=("x",))
def all_reduce(x: torch.Tensor, handle: str) -> None:
    """Sum ``x`` in place over the ranks of tensor-parallel group ``handle``."""
    if not getattr(_thread, "skip_collectives", False):
        handles.object_of(handle).all_reduce_eager(x)


@all_reduce.register_fake
def _all_reduce_fake(x: torch.Tensor, handle: str) -> None:
    return None


@torch.library.custom_op("minisgl::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     kv_index: torch.Tensor, mask: torch.Tensor | None,
                     scale: float) -> torch.Tensor:
    """``attention.decode_attention``: whether the native kernel takes the step is decided
    when it runs, not baked into the graph."""
    return attention.decode_attention(q, k_cache, v_cache, kv_index, mask, scale)


@decode_attention.register_fake
def _decode_attention_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           kv_index: torch.Tensor, mask: torch.Tensor | None,
                           scale: float) -> torch.Tensor:
    return q.new_empty((q.shape[0], q.shape[1] * q.shape[2]))


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           kv_index: torch.Tensor, mask: torch.Tensor | None, scale: float,
                           ws: attention.Workspace | None = None) -> torch.Tensor:
    """Decode attention, however this step runs: one C++ operator call where the operators are
    built, the opaque op in a traced step (the kernel is chosen when the step runs), else the
    native kernel or SDPA from Python. ``q [B, Hq, D]`` -> ``[B, Hq * D]``."""
    compiling = torch.compiler.is_compiling()
    if q.device.type == "cpu" and native_ops.available() and (not compiling or native_in_graph()):
        return torch.ops.minisgl.native_decode_attention(q, k_cache, v_cache, kv_index, mask,
                                                         scale)
    if compiling:
        return torch.ops.minisgl.decode_attention(q, k_cache, v_cache, kv_index, mask, scale)
    return attention.decode_attention(q, k_cache, v_cache, kv_index, mask, scale, ws)
