"""Offline benchmark: the engine vs transformers' static-batch ``generate``, same run, same work.

For each batch size, the same prompts go through the engine (all requests added at once) and
through ``model.generate`` (one left-padded batch); both greedy, fp32, EOS ignored, ``max_tokens``
new tokens per prompt, same torch thread count. Each system runs every batch size ``repeat``
times, alternating, and keeps its best time (on a shared machine the best run is the one least
disturbed by other work). Reports output tokens/s of both and their ratio, and the engine's peak
resident memory (measured before transformers' model is loaded).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain why the sky is blue.",
    "List five fruits that are rich in vitamin C and say one thing about each of them.",
    "What is the capital of Australia?",
    "Describe the water cycle to a ten-year-old.",
    "Give me three tips for learning a new language quickly and remembering new words.",
    "How do airplanes stay in the air?",
    "Summarize the plot of Romeo and Juliet in a few sentences.",
    "Write a haiku about the ocean.",
    "What are the main differences between a cat and a dog as pets, for a family with kids?",
    "Translate 'good morning' into French, Spanish and German.",
    "Why do leaves change color in autumn?",
    "Suggest a name for a coffee shop by the sea.",
    "Explain recursion with a simple example in Python.",
    "What should I pack for a weekend hiking trip in the mountains in early spring?",
    "Tell me a fun fact about octopuses.",
]


@dataclass(frozen=True)
class Result:
    """One batch size's figures."""

    batch: int
    max_tokens: int
    engine_tok_s: float
    hf_tok_s: float
    ratio: float
    engine_s: float
    hf_s: float
    engine_peak_rss_mib: float


def _prompts(batch: int) -> list[str]:
    return [PROMPTS[i % len(PROMPTS)] for i in range(batch)]


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_engine(engine: Any, prompts: list[list[int]], max_tokens: int) -> tuple[float, int]:
    """Seconds to finish every prompt (added at once) and the tokens produced."""
    from minisgl_core.messages import SamplingParams

    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"bench-{start}-{i}", p, sp)
    produced = sum(len(o.token_ids) for o in engine.run_until_idle())
    return time.perf_counter() - start, produced


def run_hf(model: Any, tokenizer: Any, prompts: list[list[int]], max_tokens: int
           ) -> tuple[float, int]:
    """transformers' static batch: left-padded prompts, one ``generate`` call."""
    import torch

    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=max_tokens,
                             min_new_tokens=max_tokens, do_sample=False, pad_token_id=pad)
    return time.perf_counter() - start, (out.shape[1] - width) * len(prompts)


def main(model: str | None, batch_sizes: list[int], max_tokens: int, json_lines: bool,
         profile: bool = False, threads: int | None = None, repeat: int = 3,
         tp: int = 1) -> None:
    """Run the comparison and print a table (or one JSON object per batch size).

    With ``tp`` > 1 the engine is split over ``tp`` ranks on this host that share ``threads``
    between them (transformers keeps all of them); the peak memory is rank 0's.
    """
    import torch

    from minisgl_core.engine.config import EngineConfig, threads_per_rank
    from minisgl_core.engine.engine import Engine
    from minisgl_core.model_lookup import resolve

    batch_sizes = list(batch_sizes) or [1, 8, 32]
    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    resolved = resolve(model)
    path = Path(resolved.path)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    split = f", tensor-parallel over {tp} ranks" if tp > 1 else ""
    say(f"model {path.name}, fp32, {threads} threads{split}, {max_tokens} new tokens per "
        f"prompt, best of {repeat}")
    # no prefix cache: repeated runs of the same prompts must cost what the first one did, as
    # they do for transformers
    per_rank = threads_per_rank(threads, tp)
    config = EngineConfig(model=str(path), num_threads=per_rank, cache="naive",
                          max_running_requests=max(128, *batch_sizes))
    if tp == 1:
        _compare(Engine(config, resolved.model_class), path, batch_sizes, max_tokens,
                 json_lines, profile, repeat)
        return
    from minisgl_core.engine.tp_local import LocalGroup

    group = LocalGroup(config, resolved.model_class, tp)
    try:
        _compare(group.engine, path, batch_sizes, max_tokens, json_lines, profile, repeat,
                 threads={"engine": per_rank, "hf": threads})
    finally:
        group.close()


def _compare(engine: Any, path: Any, batch_sizes: list[int], max_tokens: int, json_lines: bool,
             profile: bool, repeat: int, threads: dict[str, int] | None = None) -> None:
    """The runs and the report; ``threads`` sets torch's threads per system when they differ
    (rank 0 of a split engine shares the cores that transformers has alone)."""
    import torch

    def use(system: str) -> None:
        if threads:
            torch.set_num_threads(threads[system])

    def engine_run(prompts: list[list[int]], tokens: int) -> tuple[float, int]:
        use("engine")
        return run_engine(engine, prompts, tokens)

    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    tok = engine.tokenizer
    encoded = {b: [tok.encode(p) for p in _prompts(b)] for b in batch_sizes}
    engine_run(encoded[batch_sizes[0]][:1], 4)  # warm-up
    best_engine = {b: engine_run(encoded[b], max_tokens) for b in batch_sizes}
    peak = _peak_rss_mib()  # the engine alone: transformers' model is not loaded yet
    if profile:
        for b in batch_sizes:
            say(format_profile(b, profile_decode(engine, encoded[b])))
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    use("hf")
    run_hf(hf, tok, encoded[batch_sizes[0]][:1], 4)  # warm-up
    best_hf: dict[int, tuple[float, int]] = {}
    for i in range(repeat):
        for b in batch_sizes:
            if i > 0:
                best_engine[b] = min(best_engine[b], engine_run(encoded[b], max_tokens))
            use("hf")
            best_hf[b] = min(best_hf.get(b, (float("inf"), 0)),
                             run_hf(hf, tok, encoded[b], max_tokens))
    results = []
    for b in batch_sizes:
        (es, en), (hs, hn) = best_engine[b], best_hf[b]
        r = Result(b, max_tokens, en / es, hn / hs, (en / es) / (hn / hs), es, hs, peak)
        results.append(r)
        if json_lines:
            print(json.dumps(asdict(r)), flush=True)
    if not json_lines:
        print(markdown(results))


def markdown(results: Sequence[Result]) -> str:
    """The results as a markdown table."""
    lines = ["| batch | engine tok/s | transformers tok/s | ratio |",
             "| ---: | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r.batch} | {r.engine_tok_s:.1f} | {r.hf_tok_s:.1f} | {r.ratio:.2f}x |")
    if results:
        lines.append(f"\nengine peak RSS: {results[0].engine_peak_rss_mib:.0f} MiB")
    return "\n".join(lines)


def profile_decode(engine: Any, prompts: list[list[int]], steps: int = 8) -> dict[str, float]:
    """Milliseconds per decode step: wall time, and op time split into matmul / attention / rest.

    The wall time is the median of unprofiled steps; the split comes from torch.profiler's self
    CPU times over as many profiled steps (so "python" = wall - all op time is approximate).
    """
    import statistics

    from torch.profiler import ProfilerActivity, profile

    from minisgl_core.messages import SamplingParams

    sp = SamplingParams(max_tokens=2 * steps + 4, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"profile-{time.perf_counter()}-{i}", p, sp)
    while any(r.num_cached < len(r.prompt_ids) for r in engine.requests.values()):
        engine.step()  # finish every prefill first: only decode steps are measured
    walls = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        walls.append((time.perf_counter() - start) * 1e3)
    matmul = {"aten::mm", "aten::addmm", "mkldnn::_linear_pointwise"}
    attention = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::index_select",
                 "aten::_scaled_dot_product_attention_math", "aten::bmm", "aten::_softmax",
                 "aten::index_copy_"}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            engine.step()
    split = {"matmul": 0.0, "attention": 0.0, "other_ops": 0.0}
    for e in prof.key_averages():
        key = "matmul" if e.key in matmul else "attention" if e.key in attention else "other_ops"
        split[key] += e.self_cpu_time_total / 1e3 / steps
    for _ in engine.run_until_idle():  # finish the profiled requests
        pass
    wall = statistics.median(walls)
    return {"batch": float(len(prompts)), "step_ms": wall, **split,
            "python": max(0.0, wall - sum(split.values()))}


def format_profile(batch: int, p: dict[str, float]) -> str:
    """One line per profile."""
    return (f"decode step, batch {batch}: {p['step_ms']:.1f} ms = matmul {p['matmul']:.1f} + "
            f"attention (gather, store, sdpa) {p['attention']:.1f} + other ops "
            f"{p['other_ops']:.1f} + python {p['python']:.1f}")


if __name__ == "__main__":
    main(None, [1, 8, 32], 64, json_lines=False, profile="--profile" in sys.argv)
