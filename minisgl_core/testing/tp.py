"""Run greedy generation on N tensor-parallel ranks in spawned processes (tests, figures)."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback
from collections.abc import Sequence
from typing import Any

from minisgl_core.testing.service import free_port


def _generate(engine: Any, prompts: Sequence[Sequence[int]],
              max_tokens: int) -> tuple[list[list[int]], float]:
    """Greedy tokens of every prompt (one batch) and the seconds it took."""
    from minisgl_core.messages import SamplingParams

    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, sp)
    out: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    start = time.perf_counter()
    while engine.has_work():
        for o in engine.step():
            out[o.request_id].extend(o.token_ids)
    return [out[str(i)] for i in range(len(prompts))], time.perf_counter() - start


def generate(model: str, prompts: Sequence[Sequence[int]], max_tokens: int,
             **options: Any) -> tuple[list[list[int]], float]:
    """Greedy tokens on one rank in this process (the tp=1 reference) and the seconds taken."""
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine

    return _generate(Engine(EngineConfig(model=model, **options)), prompts, max_tokens)


def _rank_main(rank: int, size: int, port: int, model: str, prompts: list[list[int]],
               max_tokens: int, options: dict[str, Any], results: Any) -> None:
    try:
        from minisgl_core.engine.config import EngineConfig
        from minisgl_core.engine.tp_rank import start_rank

        engine = start_rank(EngineConfig(model=model, **options), rank, size, "127.0.0.1", port,
                            timeout_s=60)
        if rank == 0:
            results.put(("ok", _generate(engine, prompts, max_tokens)))
        else:
            engine.follow()
        engine.close()
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        results.put(("error", f"rank {rank}: {traceback.format_exc()}"))


def generate_tp(model: str, prompts: Sequence[Sequence[int]], max_tokens: int, size: int,
                timeout: float = 120.0, **options: Any) -> tuple[list[list[int]], float]:
    """Greedy tokens from ``size`` ranks (spawned, gloo on 127.0.0.1) and rank 0's seconds."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    args = [[list(p) for p in prompts], max_tokens, dict(options), results]
    procs = [ctx.Process(target=_rank_main, args=(r, size, port, model, *args), daemon=True)
             for r in range(size)]
    for p in procs:
        p.start()
    try:
        status, value = results.get(timeout=timeout)
    except queue.Empty:
        raise TimeoutError(f"{size} ranks gave no result within {timeout:.0f} s") from None
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    if status != "ok":
        raise RuntimeError(value)
    return value  # type: ignore[no-any-return]
