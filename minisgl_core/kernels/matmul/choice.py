"""Pick each linear layer's matmul kernel by timing the candidates on this host, once, at load.

For each weight shape of the model (qkv, o, gate_up, down, LM head) and each row bucket
(linear.BUCKETS) the candidate kernels run a few times on a weight of that shape; a layer keeps
one weight layout (two copies of the weights would double their memory), the one whose best
kernels lose least to the overall best across buckets, and uses its fastest kernel per bucket.
Timing is bounded by ``budget_s``; the result is cached on disk under the cache directory, keyed
by CPU model and the features it may use (kernels.cpu_features), torch version, threads, shapes and
candidates, so a restart reuses it and the choice for a given cache file is always the same.
``MINISGL_LINEAR=<kernel>`` skips all of this, and so does ``deterministic`` (one batch-invariant
kernel for every bucket: matmul/invariant.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from minisgl_core.kernels import cpu_features
from minisgl_core.kernels.matmul import wo_copy
from minisgl_core.kernels.matmul.base import BUCKETS, Kernel
from minisgl_core.kernels.matmul.choice_cache import (
    BUSY_LOAD,
    cache_root,
    read_choice,
    write_choice,
)
from minisgl_core.kernels.matmul.choice_rules import HEAD_ROWS, pick, without_hopeless
from minisgl_core.kernels.matmul.invariant import deterministic_kernels
from minisgl_core.kernels.matmul.registry import all_kernels, fp32_kernels, weight_only_kernels
from minisgl_core.kernels.matmul.w8a8 import int8_kernels, role_scheme
from minisgl_core.kernels.native import library

# the whole measurement, packing included, at the first start (then cached): 2.5 s until the
# fifth bucket, whose 512 rows took the default model's choice under an AVX2-only mask on the
# Xeon from 1.2-1.6 s to 2.1-2.5 s, beside other work
BUDGET_S = 4.0
REPEATS = 4  # timed runs per kernel and bucket, after one warm-up; the fastest counts
BIG = 3e8  # multiply-adds (rows x out x in) above which one timed run is enough
# Larger layers are timed on their first output rows, up to MAX_WEIGHTS weights (the default
# model's LM head, 49,152 x 576, on 8,192 rows): the time grows linearly with the output width
# there, and the ranking of kernels does not change. So the whole choice fits its budget at any
# model size: untrimmed, Qwen3-1.7B's five shapes ran past it at every start.
MAX_WEIGHTS = 8192 * 576
# The decode buckets (up to COLD_ROWS rows) stream each weight from memory once a step (the
# model is far larger than any cache). Timed with a weight left in cache by the previous run, a
# kernel that computes fast but streams slowly would win (the default model's bf16 copy at 32
# rows, 1.17x slower than the int4 panels on AMX from memory): so those runs read COLD_BYTES of
# something else first (more than a server's L2, and pushing the weight down the L3).
COLD_ROWS = 32
METHOD = 9  # in the cache key: a change in how kernels are timed or what one does (4: a kernel
# timed only where it serves; 5: large layers trimmed to MAX_WEIGHTS; 6: a kernel far behind not
# timed at the prefill buckets; 7: unless its time stayed flat below; 8: 32 rows timed cold;
# 9: the LM head's layout judged up to HEAD_ROWS) invalidates old choices
COLD_BYTES = 64 << 20
FIRST_PREFILL_BUCKET = 3

Shapes = Mapping[str, tuple[int, int]]  # role -> (out, in)
Timer = Callable[[Kernel, object, torch.Tensor], float]


@dataclass(frozen=True)
class Choice:
    """Each role's kernel per bucket, and where the choice came from."""

    kernels: dict[str, tuple[Kernel, ...]]
    source: str  # "forced by MINISGL_LINEAR=...", "measured in 1.2 s", "cache <path>", ...
    # role -> the chosen kernel's seconds per bucket, where measured (now or in the cache)
    seconds: dict[str, tuple[float, ...]] | None = None

    def names(self) -> dict[str, list[str]]:
        """role -> kernel name per bucket (what the cache file holds)."""
        return {role: [k.name for k in ks] for role, ks in self.kernels.items()}

    def summary(self) -> str:
        """One line for the log: ``qkv: 1 dense, 8+ onednn; ...``."""
        parts = []
        for role, names in self.names().items():
            runs: list[str] = []
            for i, name in enumerate(names):
                if i == 0 or name != names[i - 1]:
                    runs.append(f"{BUCKETS[i]}{'+' if i else ''} {name}")
            parts.append(f"{role}: {', '.join(runs)}")
        return "; ".join(parts)


def candidates(role: str, device: torch.device, dtype: torch.dtype,
               quantization: str | None, copy_fits: bool = False) -> list[Kernel]:
    """The kernels that can run this role here, in tie-break order (those keeping a copy of the
    weight only where ``copy_fits``)."""
    scheme = role_scheme(role, quantization)
    if scheme is None:
        pool = fp32_kernels()
    elif scheme == "int8":
        pool = int8_kernels()
    else:
        pool = weight_only_kernels(scheme)
    found = [k for k in pool if (copy_fits or not k.copies) and k.available(device, dtype)]
    if scheme is not None and not found:
        raise RuntimeError(f"--quantization {quantization} needs an {scheme} matmul kernel, "
                           "and none works "
                           f"here (tried {', '.join(k.name for k in pool)}; torch "
                           f"{torch.__version__}, quantized engines "
                           f"{torch.backends.quantized.supported_engines})")
    return found


def choose(shapes: Shapes, device: torch.device, dtype: torch.dtype,
           quantization: str | None = None, *, shared: Collection[str] = (),
           cache: Path | None = None, budget_s: float = BUDGET_S, timer: Timer | None = None,
           load: Callable[[], float] | None = None, remeasure: bool = False,
           deterministic: bool = False, copy_weights: int = 0) -> Choice:
    """Each role's kernel per bucket: forced, cached, or measured now (and cached).

    ``shared``: roles whose weight another part of the model keeps too (a tied LM head is the
    embedding table); they get only kernels that use that tensor as it is, so it stays one copy
    (108 MiB on the default model), unless ``MINISGL_LINEAR`` forces another or none does (a
    quantized head is a copy of its own, a quarter or less of the table's bytes).
    A choice measured on a busy machine (``load()``, the load average per core, above
    ``BUSY_LOAD``) is cached too, but measured again at the first start on a quiet one: timings
    taken beside other work can pick a kernel 1.8x slower at 32 rows. ``remeasure``: time again
    even where a cached choice exists (a caller that found the cached timings implausible).
    ``deterministic``: the batch-invariant kernels, nothing timed (ValueError where a role has
    none). The LM head is never offered a kernel that rounds its inputs to int8 (unless
    ``MINISGL_LINEAR`` forces one). ``copy_weights``: the weights of the model's layers, all
    together (``layer_weights``), for the int4 layout that keeps a copy of them in ``dtype``
    beside the panels (wo_copy.py): offered only where that copy fits this host's memory.
    """
    if deterministic:
        schemes = {role: role_scheme(role, quantization) for role in shapes}
        return Choice(deterministic_kernels(schemes, device, dtype),
                      "batch-invariant (--deterministic)")
    copy_fits = wo_copy.fits(copy_weights, dtype)
    pools = {role: candidates(role, device, dtype, quantization, copy_fits) for role in shapes}
    forced = os.environ.get("MINISGL_LINEAR", "").strip().lower()
    if forced:
        return _forced(forced, pools, quantization)
    for role in pools.keys() & set(shared):
        pools[role] = [k for k in pools[role] if k.shares_weight] or pools[role]
    for role, pool in pools.items():
        if role == "lm_head":  # the logits' inputs are never rounded (docs/design/kernels.md, 17.)
            pools[role] = [k for k in pool if not k.rounds_inputs] or pool
        else:  # where rounding is allowed, the rounding twin is the faster
            names = {k.name for k in pool}
            pools[role] = [k for k in pool if k.unrounded_twin_of not in names]
    if all(len(pool) == 1 for pool in pools.values()):
        return Choice({r: (p[0],) * len(BUCKETS) for r, p in pools.items()}, "only candidate")
    key = {"method": METHOD, "cpu": cpu_features.cpu_model(),
           "features": sorted(cpu_features.features()), "torch": torch.__version__,
           "threads": torch.get_num_threads(), "native": library.source_digest(),
           "device": str(device), "dtype": str(dtype), "buckets": list(BUCKETS),
           "shapes": {r: list(s) for r, s in sorted(shapes.items())},
           "candidates": {r: [k.name for k in p] for r, p in sorted(pools.items())}}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = (cache if cache is not None else cache_root()) / f"linear-{digest}.json"
    now = (load or machine_load)()
    cached = None if remeasure else read_choice(path, pools, remeasure_if_busy=now <= BUSY_LOAD)
    if cached is not None:
        kernels, seconds = cached
        return Choice(kernels, f"cached in {path}", _chosen_seconds(kernels, seconds))
    start = time.perf_counter()
    times, complete = _measure(shapes, pools, start + budget_s, timer or _time, dtype)
    kernels = {role: pick(pools[role], times[role], HEAD_ROWS if role == "lm_head" else None)
               for role in shapes}
    took = time.perf_counter() - start
    if complete:  # a partial measurement is used this once, never cached
        write_choice(path, key, {r: [k.name for k in ks] for r, ks in kernels.items()}, times, now)
    return Choice(kernels, f"measured in {took:.1f} s" + ("" if complete else
                                                            " (budget reached: partly)"),
                  _chosen_seconds(kernels, times) if complete else None)


def layer_weights(shapes: Shapes, num_layers: int) -> int:
    """The weights of ``num_layers`` layers of these shapes (the LM head not counted)."""
    return num_layers * sum(o * i for role, (o, i) in shapes.items() if role != "lm_head")


def seconds_of(choice: Choice) -> dict[str, tuple[float, ...]] | None:
    """role -> seconds per bucket of the chosen kernels (None: not measured)."""
    return choice.seconds


def _chosen_seconds(kernels: Mapping[str, Sequence[Kernel]],
                    times: Mapping[str, Mapping[str, Sequence[float]]] | None,
                    ) -> dict[str, tuple[float, ...]] | None:
    """The seconds of each role's chosen kernel per bucket, from all the timings."""
    try:
        out = {r: tuple(float(times[r][k.name][b]) for b, k in enumerate(ks))  # type: ignore
               for r, ks in kernels.items()}
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return out if all(t != float("inf") for ts in out.values() for t in ts) else None


def _forced(name: str, pools: dict[str, list[Kernel]], quantization: str | None) -> Choice:
    known = all_kernels()
    if name not in known:
        raise RuntimeError(f"MINISGL_LINEAR={name} names no kernel (known: {', '.join(known)})")
    kernel = known[name]
    if kernel.quantized is not None and quantization != kernel.quantized:
        raise RuntimeError(f"MINISGL_LINEAR={name} is a {kernel.quantized} kernel: it needs "
                           f"--quantization {kernel.quantized}")
    out: dict[str, tuple[Kernel, ...]] = {}
    for role, pool in pools.items():
        if kernel.quantized == pool[0].quantized:  # it applies to this role
            match = [k for k in pool if k.name == name]
            if not match:
                raise RuntimeError(f"MINISGL_LINEAR={name}, but that kernel does not work here")
            out[role] = (match[0],) * len(BUCKETS)
        else:
            out[role] = (pool[0],) * len(BUCKETS)
    return Choice(out, f"forced by MINISGL_LINEAR={name}")


def _time(kernel: Kernel, packed: object, x: torch.Tensor) -> float:
    start = time.perf_counter()
    kernel.run(packed, x, None, None)
    return time.perf_counter() - start


def _measure(shapes: Shapes, pools: dict[str, list[Kernel]], deadline: float,
             timer: Timer, dtype: torch.dtype = torch.float32,
             ) -> tuple[dict[str, dict[str, list[float]]], bool]:
    """Seconds per (role, kernel, bucket); inf where the budget ran out first."""
    inf = float("inf")
    times = {r: {k.name: [inf] * len(BUCKETS) for k in pools[r]} for r in shapes}
    evict = torch.ones(COLD_BYTES // 4)
    with torch.inference_mode():
        for role, (out, inp) in sorted(shapes.items(), key=lambda s: s[1][0] * s[1][1]):
            pool = pools[role]
            if len(pool) < 2:
                continue
            # values barely matter to a matmul's speed; a constant avoids randn's cost on 28M
            out = timed_width(out, inp)
            weight = torch.full((out, inp), 0.01, dtype=dtype)
            weight[:, 0] = 0.013  # not Q4_0's then: int4 timed with mins, as most weights are
            packed: dict[str, object] = {}
            for k in pool:
                if k.layout not in packed:
                    packed[k.layout] = k.pack(weight)
            for b, rows in enumerate(BUCKETS):
                x = torch.randn(rows, inp, generator=torch.Generator().manual_seed(rows)).to(dtype)
                # a kernel that does what an earlier one does at this row count is not timed
                timed = [k for k in pool if k.same_as(rows) is None and k.serves(rows)]
                if b >= FIRST_PREFILL_BUCKET:
                    timed = without_hopeless(timed, times[role], b)
                for k in timed:  # warm-up: first calls build oneDNN primitives
                    k.run(packed[k.layout], x, None, None)
                for _ in range(REPEATS if rows * out * inp <= BIG else 1):
                    for k in timed:  # interleaved: a burst of other load hits all alike
                        if rows <= COLD_ROWS:
                            evict.sum()  # reads 64 MiB: the weight is no longer in cache
                        t = timer(k, packed[k.layout], x)
                        times[role][k.name][b] = min(times[role][k.name][b], t)
                for k in pool:
                    twin = k.same_as(rows)
                    if twin is not None:
                        times[role][k.name][b] = times[role][twin][b]
                if time.perf_counter() > deadline:
                    return times, False
    return times, True


def timed_width(out: int, inp: int) -> int:
    """The output rows a layer of ``out`` x ``inp`` weights is timed on: all of them, or the
    first MAX_WEIGHTS worth (whole 64-row blocks, at least one)."""
    return min(out, max(64, MAX_WEIGHTS // inp // 64 * 64))


def machine_load() -> float:
    """The 1-minute load average per core (0 where the OS keeps none)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return 0.0
