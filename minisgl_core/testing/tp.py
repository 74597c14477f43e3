"""Run functions on N tensor-parallel ranks in spawned processes (tests, figures)."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from minisgl_core.testing.service import free_port


def _generate(engine: Any, prompts: Sequence[Sequence[int]],
              max_tokens: int) -> tuple[list[list[int]], float]:
    """Greedy tokens of every prompt (one batch) and the seconds it took."""
    from minisgl_core.wire.schema import SamplingParams

    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, sp)
    out: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    for o in engine.run_until_idle():
        out[o.request_id].extend(o.token_ids)
    return [out[str(i)] for i in range(len(prompts))], time.perf_counter() - start


def generate(model: str, prompts: Sequence[Sequence[int]], max_tokens: int,
             **options: Any) -> tuple[list[list[int]], float]:
    """Greedy tokens on one rank in this process (the tp=1 reference) and the seconds taken."""
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import resolve

    resolved = resolve(model)
    return _generate(Engine(EngineConfig(model=resolved.path, **options), resolved.model_class),
                     prompts, max_tokens)


def _rank_main(fn: Callable[..., Any], rank: int, size: int, port: int, args: tuple[Any, ...],
               results: Any) -> None:
    try:
        results.put((rank, "ok", fn(rank, size, port, *args)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        results.put((rank, "error", f"rank {rank}: {traceback.format_exc()}"))


def run_ranks(fn: Callable[..., Any], size: int, *args: Any,
              timeout: float = 300.0) -> dict[int, Any]:
    """``fn(rank, size, port, *args)`` on ``size`` spawned ranks (``fn`` importable by name);
    every rank's return value. RuntimeError with a rank's traceback if one raised."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(fn, r, size, port, args, results),
                         daemon=True) for r in range(size)]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < size:
            try:
                rank, status, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"ranks {sorted(set(range(size)) - set(got))} of {size} gave "
                                   f"no result within {timeout:.0f} s") from None
            if status != "ok":
                raise RuntimeError(value)
            got[rank] = value
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    return got


def _generate_rank(rank: int, size: int, port: int, model: str, prompts: list[list[int]],
                   max_tokens: int, options: dict[str, Any]) -> Any:
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.tp_rank import start_rank
    from minisgl_core.plugin.model_lookup import resolve

    resolved = resolve(model)
    engine = start_rank(EngineConfig(model=resolved.path, **options), resolved.model_class, rank,
                        size, "127.0.0.1", port)
    # compiled: every decode step of the run on this rank's graphs (a failed compile is an error)
    if engine.compiled is not None and not engine.compiled.wait():
        raise RuntimeError(f"rank {rank}: the decode step {engine.compiled.status()}")
    if rank != 0:
        result = engine.follow()
    elif engine.compiled is None:
        result = _generate(engine, prompts, max_tokens)
    else:
        from minisgl_core.testing.compiled_runs import compiled_runs

        graphs, result = compiled_runs(lambda: _generate(engine, prompts, max_tokens))
        if not graphs:
            raise RuntimeError("rank 0: no decode step ran on its compiled graphs")
    engine.close()
    return result


def generate_tp(model: str, prompts: Sequence[Sequence[int]], max_tokens: int, size: int,
                timeout: float = 300.0, **options: Any) -> tuple[list[list[int]], float]:
    """Greedy tokens from ``size`` ranks (spawned, gloo on 127.0.0.1) and rank 0's seconds."""
    got = run_ranks(_generate_rank, size, model, [list(p) for p in prompts], max_tokens,
                    dict(options), timeout=timeout)
    return got[0]  # type: ignore[no-any-return]


def all_reduce_rank(rank: int, size: int, port: int, use_shm: bool) -> dict[str, Any]:
    """One rank of an all-reduce check: ``TensorParallel.all_reduce`` next to gloo's own, on a
    few shapes (both shared-memory banks in turn) and one too big for a shared slot."""
    import torch
    import torch.distributed as dist

    from minisgl_core.engine.parallel import init_tensor_parallel
    from minisgl_core.engine.shm_allreduce import CAPACITY

    os.environ["MINISGL_TP_SHM"] = "1" if use_shm else "0"
    tp = init_tensor_parallel("127.0.0.1", port, rank, size, torch.device("cpu"), 60)
    gen = torch.Generator().manual_seed(rank)
    out: dict[str, Any] = {"shm": tp.shm is not None, "sums": [], "gloo": []}
    for shape in ((1, 576), (7, 576), (3,)):
        x = torch.randn(shape, generator=gen)
        ref = x.clone()
        dist.all_reduce(ref)
        out["sums"].append(tp.all_reduce(x).flatten().tolist())  # lists: tensors cannot
        out["gloo"].append(ref.flatten().tolist())  # outlive this process in the queue
    big = torch.full((CAPACITY + 1,), float(rank + 1))
    out["big"] = float(tp.all_reduce(big)[-1])
    tp.close()
    return out
