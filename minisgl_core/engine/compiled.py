"""The compiled decode step (``--compile``): the model's forward for steps that only decode,
compiled by torch.compile (inductor, C++ wrapper) on a background thread while the eager forward
serves.

Two graphs cover every decode step: one for a single request and one for any batch of two or
more, with the batch size and the context length symbolic (torch specializes size 1, so batch 1
gets its own tighter code). Matmuls, the all-reduce and the decode attention stay the engine's
own kernels behind custom ops (kernels/ops.py); what gets fused is the code between them:
RMSNorm, RoPE, the K/V store, SiLU x up, the residual adds. Steps that prefill, and every step
before its graph is ready, run eagerly. The serving thread only runs graphs already compiled
(``torch._dynamo.run``): a step whose guards no graph passes runs eagerly instead of stalling
to compile. A graph whose guards pass is called straight from dynamo's cache entry, without
dynamo's wrapper around each call (direct_graphs.py). Inductor's caches live under the
project's cache directory (``inductor/``).

So that the service never serves slower than eagerly: graphs this configuration compiled before
(a marker per configuration says so) are loaded from inductor's cache before the engine is ready
(seconds); new ones compile in a child process at the lowest CPU priority (compile_child.py),
which takes only the CPU that serving leaves, and are loaded when the engine is next idle. A
thread in this process would hold the GIL the serving thread takes back after every op: on 2
cores, one stream decoded at a fifth of its eager speed while graphs compiled or loaded beside it.
Tensor-parallel ranks and other devices compile on such a thread all the same (niced).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from minisgl_core.engine.attention import AttentionMetadata, GroupMeta, RowKeys, Workspace
from minisgl_core.engine.direct_graphs import MISSED, DirectGraphs
from minisgl_core.engine.head_rows import forward_rows
from minisgl_core.engine.kv_cache import KVPool
from minisgl_core.engine.step_guards import keep_input_guards, own_copy
from minisgl_core.kernels import python_ops_in_graphs, vector_code_kind, without_collectives

log = logging.getLogger(__name__)
WARM_BATCHES = (1, 2)  # batch 1, then the graph every batch >= 2 shares
_WARM_LEN = 17  # keys in the warm-up steps: any length >= 2 that no other size equals
# _decode_step's arguments fixed for the engine's life: a graph keeps the guards on the others
_FIXED_ARGS = ("model", "kv", "ws")
# graphs whose fused code runs on one thread: at one row each fused kernel handles 0.5-12 K
# values, less than opening a parallel region costs (design/kernels.md, 12)
SERIAL_FUSED_CODE = frozenset({1})
# inductor's options for both graphs. No size asserts: the generated code checked every input's
# and every custom op's output's sizes and strides at each step, about 280 checks of ~0.35 us a
# step on the default model (2.9% of its one-request step on the 2-core Zen 5), while the step's
# own arguments are guarded (step_guards.py), the other inputs are fixed with the engine and the
# custom ops' output shapes are the kernels' own (tested against the eager step)
GRAPH_OPTIONS: dict[str, Any] = {"cpp_wrapper": True, "size_asserts": False}


def _decode_step(model: Any, input_ids: torch.Tensor, positions: torch.Tensor,
                 out_slots: torch.Tensor, kv_index: torch.Tensor, mask: torch.Tensor | None,
                 kv: KVPool, ws: Workspace, invariant_rows: bool = False) -> torch.Tensor:
    """One decode-only forward from tensors alone: ``input_ids [B]``, ``kv_index [B * L]``,
    ``mask [B, 1, 1, L]`` (None: every key visible) -> the rows the LM head takes ``[B, H]``
    (head_rows.py: the final norm fused in). The batch and the context length are read from
    shapes, never from Python ints, so they stay symbolic. ``invariant_rows``: attention by the
    batch-invariant kernel (--deterministic)."""
    b = input_ids.shape[0]
    group = GroupMeta(b, 1, kv_index.shape[0] // b, kv_index, mask, None, None, False)
    rows = None
    if invariant_rows:  # row i is sequence i; it sees keys 0..positions[i]
        rows = RowKeys(kv_index.view(b, -1), torch.arange(b, device=input_ids.device))
    meta = AttentionMetadata(positions, out_slots, b, group, None, rows)
    return forward_rows(model, input_ids, meta, kv, ws)


def inductor_cache() -> str:
    """Where inductor keeps its FX-graph and AOT caches: ``$TORCHINDUCTOR_CACHE_DIR``, else the
    project's cache directory's ``inductor/<vector_code_kind()>`` (set for this process, so
    compiled graphs outlive it): inductor's own keys do not keep graphs made for one kind of
    vector code from a process that runs another (kernels.cpu_features says why)."""
    from minisgl_core.store.paths import cache_dir

    return os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                                 str(cache_dir() / "inductor" / vector_code_kind()))


def graphs_marker(key_text: str) -> Path:
    """The file that says the graphs of the configuration ``key_text`` (with this torch and
    minisgl, thread count and device) are in inductor's cache."""
    from minisgl_core.version import __version__

    # the graphs' own options too: graphs compiled with others are not in the cache
    text = (f"{torch.__version__} {__version__} {torch.get_num_threads()} "
            f"serial {sorted(SERIAL_FUSED_CODE)} {sorted(GRAPH_OPTIONS.items())} {key_text}")
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    return Path(inductor_cache()) / "minisgl-decode" / f"{key}.json"


def write_marker(marker: Path, compile_s: dict[int, float]) -> None:
    """Say that ``marker``'s graphs are in the cache (and how long they took to compile)."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"compile_s": compile_s}))
    os.replace(tmp, marker)  # atomic: two starts may finish together


def _lowest_priority() -> None:
    """Nice this thread (and the compiler processes it starts) to 19: on Linux a thread has a
    priority of its own; elsewhere it would be the whole process's, so nothing is done."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class CompiledDecode:
    """``forward(input_ids, meta, kv, ws)`` as the model's, compiled for decode-only steps once
    ``start()``'s background compiles finish; eager for everything else."""

    def __init__(self, model: Any, kv: KVPool, ws: Workspace, device: torch.device,
                 invariant_rows: bool = False) -> None:
        self.model, self.kv, self.ws, self.device = model, kv, ws, device
        self.invariant_rows = invariant_rows  # --deterministic: _decode_step's invariant_rows
        inductor_cache()
        step = own_copy(_decode_step)  # this engine's graphs, apart from any other's
        self._compiled = torch.compile(step, options={
            **GRAPH_OPTIONS, "guard_filter_fn": keep_input_guards(
                [a for a in inspect.signature(step).parameters if a not in _FIXED_ARGS])})
        self._run_only = torch._dynamo.run(step)
        self._direct = DirectGraphs(step)  # the same graphs, without dynamo's call wrapper
        self._ready: set[int] = set()  # warm batches whose graph is compiled (1, 2)
        self._closed = False
        self._thread: threading.Thread | None = None
        self.failure: str | None = None
        self.compile_s: dict[int, float] = {}
        self.marker: Path | None = None
        self.loaded_before_ready = False  # the graphs came from the cache before serving
        self._child: subprocess.Popen[bytes] | None = None  # compiling them, when not None

    # ---- compiling ---------------------------------------------------------------------------

    def start(self, key_text: str = "", child: tuple[Any, Any] | None = None) -> None:
        """Load both graphs now when ``key_text``'s configuration compiled them before. Else
        compile them at the lowest priority: in a child process given ``child`` (the engine's
        resolved EngineConfig and model class; ``when_idle`` loads them), or on a thread."""
        self.marker = graphs_marker(key_text)
        if self.marker.exists():
            self._load("before serving")
            self.loaded_before_ready = self.ready
            return
        if child is not None:
            from minisgl_core.engine import compile_child

            self._child = compile_child.spawn(*child, self.marker, torch.get_num_threads())
        if self._child is not None:
            log.info("compiling the decode step in a child process at the lowest priority "
                     "(pid %d; the eager step serves meanwhile; cache %s)", self._child.pid,
                     inductor_cache())
            return
        self._thread = threading.Thread(target=self._in_background, name="compile-decode",
                                        daemon=True)
        self._thread.start()

    def _load(self, when: str) -> None:
        took = json.loads(self.marker.read_text()).get("compile_s", {}) if self.marker else {}
        log.info("loading the compiled decode step from inductor's cache %s (compiled in "
                 "%.1f s)", when, sum(took.values()))
        start = time.perf_counter()
        self._compile_all("loading")
        log.info("loaded the compiled decode step in %.1f s", time.perf_counter() - start)

    def _in_background(self) -> None:
        _lowest_priority()
        self._in_foreground()

    def _in_foreground(self) -> None:
        self._compile_all("compiling")
        if self.ready and self.marker is not None:  # the next start loads them before serving
            write_marker(self.marker, self.compile_s)

    def when_idle(self) -> bool:
        """Load the graphs the child process compiled, once it is done: called while no
        request runs, as loading holds this process's GIL for seconds. Whether it ended."""
        child = self._child
        if child is None or child.poll() is None or self._closed:
            return False
        self._child = None
        if child.returncode == 0 and self.marker is not None and self.marker.exists():
            self._load("while idle")
        else:
            self.failure = f"the compiling process exited with code {child.returncode}"
            log.warning("the decode step did not compile; it stays eager: %s", self.failure)
        return True

    def compile_now(self) -> None:
        """Compile both graphs on this thread (benchmarks, tests)."""
        self._compile_all("compiling")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background compiles end; whether both graphs are ready. A child
        still compiling is stopped and the graphs compiled on this thread instead, at its
        priority: the caller waits for them anyway (``timeout`` bounds a thread's only)."""
        child = self._child
        if child is not None and child.poll() is None and not self._closed:
            child.kill()
            child.wait()
            self._child = None
            self._in_foreground()
        elif child is not None:
            self.when_idle()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.ready

    @property
    def ready(self) -> bool:
        """Whether every decode step can run compiled."""
        return self._ready.issuperset(WARM_BATCHES)

    def status(self) -> str:
        """``ready``, ``compiling`` or ``failed: why``."""
        if self.failure is not None:
            return f"failed: {self.failure}"
        return "ready" if self.ready else "compiling"

    def close(self) -> None:
        """Stop a compiling child; skip the graphs not started yet on a thread (one in progress
        finishes: inductor cannot stop)."""
        self._closed = True
        if self._child is not None and self._child.poll() is None:
            self._child.kill()
            self._child.wait()

    def _compile_all(self, doing: str) -> None:
        # only the dims _warm_inputs marks are symbolic: an int that differs from one model's
        # trace to the next (two engines in one process) must not become one
        with torch.inference_mode(), torch._dynamo.config.patch(
                automatic_dynamic_shapes=False, cache_size_limit=64):
            for batch in WARM_BATCHES:
                if self._closed:
                    return
                what = "batch 1" if batch == 1 else "every batch of 2 or more"
                log.info("%s the decode step for %s (cache %s)", doing, what, inductor_cache())
                start = time.perf_counter()
                serial = torch._inductor.config.patch({"cpp.threads": 1}) \
                    if batch in SERIAL_FUSED_CODE else contextlib.nullcontext()
                try:
                    with without_collectives(), self._graph_ops(), serial:
                        self._compiled(*self._warm_inputs(batch))
                except Exception as exc:  # noqa: BLE001  (any compiler error: stay eager)
                    self.failure = f"{type(exc).__name__}: {exc}"[:500]
                    log.warning("the decode step did not compile; it stays eager: %s",
                                self.failure)
                    return
                self.compile_s[batch] = time.perf_counter() - start
                self._ready.add(batch)
                self._direct.refresh()
                log.info("compiled the decode step for %s in %.1f s", what,
                         self.compile_s[batch])

    def _graph_ops(self) -> contextlib.AbstractContextManager[None]:
        """Tensor-parallel graphs call the Python custom ops (python_ops_in_graphs says why)."""
        tp = getattr(self.model, "tp", None)
        return python_ops_in_graphs() if tp is not None else contextlib.nullcontext()

    def _warm_inputs(self, batch: int) -> tuple[Any, ...]:
        """A decode step of ``batch`` rows that writes only to scratch slot 0 (page 0, which
        padded gathers read under a mask) and reads only it."""
        dev, n = self.device, _WARM_LEN
        ids = torch.zeros(batch, dtype=torch.int64, device=dev)
        positions = torch.zeros(batch, dtype=torch.int64, device=dev)
        slots = torch.zeros(batch, dtype=torch.int64, device=dev)
        kv_index = torch.zeros(batch * n, dtype=torch.int64, device=dev)
        mask = None if batch == 1 else torch.ones(batch, 1, 1, n, dtype=torch.bool, device=dev)
        torch._dynamo.mark_dynamic(kv_index, 0)
        if mask is not None:
            for t in (ids, positions, slots):
                torch._dynamo.mark_dynamic(t, 0)
            torch._dynamo.mark_dynamic(mask, 0)
            torch._dynamo.mark_dynamic(mask, 3)
        return self.model, ids, positions, slots, kv_index, mask, self.kv, self.ws, \
            self.invariant_rows

    # ---- serving -----------------------------------------------------------------------------

    def __call__(self, input_ids: torch.Tensor, meta: AttentionMetadata, kv: KVPool,
                 ws: Workspace) -> torch.Tensor:
        """``forward_rows``: compiled when this is a decode-only step and its graph is ready."""
        g = meta.decode
        batch = input_ids.shape[0]
        if meta.prefill is not None or g is None or g.kv_len < 2 or \
                min(batch, 2) not in self._ready:
            return forward_rows(self.model, input_ids, meta, kv, ws)
        mask = g.mask
        if mask is None and batch > 1:  # the batch graph always takes a mask
            mask = torch.ones(batch, 1, 1, g.kv_len, dtype=torch.bool, device=input_ids.device)
        args = (self.model, input_ids, meta.positions, meta.out_slots, g.kv_index, mask, kv, ws,
                self.invariant_rows)
        out = self._direct(*args)
        return self._run_only(*args) if out is MISSED else out
