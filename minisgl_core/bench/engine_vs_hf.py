"""Offline benchmark: the engine vs transformers' static-batch ``generate``, same run, same work.

For each batch size, the same prompts go through the engine (all requests added at once) and
through ``model.generate`` (one left-padded batch); both greedy, fp32, EOS ignored, ``max_tokens``
new tokens per prompt, same torch thread count. Each system runs every batch size ``repeat``
times, alternating, and keeps its best time (on a shared machine the best run is the one least
disturbed by other work). Reports output tokens/s of both and their ratio, the engine's peak
resident memory (measured before transformers' model is loaded), and each engine figure as a
percentage of this host's roofline for the model, measured in the same run (bench/ceilings.py).
With several ``quantization`` values (None = fp32, "int8") one engine per value runs, interleaved.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from minisgl_core.bench import options
from minisgl_core.bench.engine_vs_hf_report import Result, label_of, markdown
from minisgl_core.bench.options import JsonOpt

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


def _prompts(batch: int) -> list[str]:
    return [PROMPTS[i % len(PROMPTS)] for i in range(batch)]


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_engine(engine: Any, prompts: list[list[int]], max_tokens: int) -> tuple[float, int]:
    """Seconds to finish every prompt (added at once) and the tokens produced."""
    from minisgl_core.wire.schema import SamplingParams

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
         tp: int = 1, quantization: Sequence[str | None] = (None,),
         ceilings: bool = True, dtypes: Sequence[str] = ("float32",),
         compile_step: bool = False) -> None:
    """Run the comparison and print a table (or one JSON object per batch size and engine).

    With ``compile_step`` every mode runs twice, eager and with its decode step compiled (the
    graphs compiled, or loaded from inductor's cache, before anything is timed).

    With ``tp`` > 1 the engine is split over ``tp`` ranks on this host that share ``threads``
    between them (transformers keeps all of them); the peak memory is rank 0's.
    """
    import contextlib

    import torch

    from minisgl_core.engine.config import EngineConfig, threads_per_rank
    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import resolve

    batch_sizes = list(batch_sizes) or [1, 8, 32]
    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    resolved = resolve(model)
    path = Path(resolved.path)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    split = f", tensor-parallel over {tp} ranks" if tp > 1 else ""
    # int8 (W8A8) takes fp32 activations only: not paired with another dtype
    modes = [(d, q, c) for d in dtypes for q in quantization if q != "int8" or d == "float32"
             for c in ((False, True) if compile_step else (False,))]
    systems = ", ".join(label_of(d, q, c) for d, q, c in modes)
    say(f"model {path.name}, engine {systems} vs transformers fp32, {threads} threads{split}, "
        f"{max_tokens} new tokens per prompt, best of {repeat}")
    per_rank = threads_per_rank(threads, tp)
    engines: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        for d, q, c in modes:
            # no prefix cache: repeated runs of the same prompts must cost what the first one
            # did, as they do for transformers
            config = EngineConfig(model=str(path), num_threads=per_rank, cache="naive",
                                  max_running_requests=max(128, *batch_sizes), quantization=q,
                                  dtype=d, compile=c)
            if tp == 1:
                engine = Engine(config, resolved.model_class)
            else:
                from minisgl_core.service.tp_local import LocalGroup

                group = LocalGroup(config, resolved.model_class, tp)
                stack.callback(group.close)
                engine = group.engine
            label = label_of(d, q, c)
            engines[label] = engine
            facts = engine.info()
            say(f"  {label}: dtype {facts['dtype']} ({facts['dtype_reason']}), "
                f"quantization {facts['quantization']}; kernels {facts['kernels']}")
            if engine.compiled is not None:
                engine.compiled.wait()
                took = ", ".join(f"batch {'1' if b == 1 else '2+'} {s:.1f} s"
                                 for b, s in engine.compiled.compile_s.items())
                say(f"  {label}: decode step {engine.compiled.status()} ({took})")
        _compare(engines, path, batch_sizes, max_tokens, json_lines, profile, repeat,
                 threads={"engine": per_rank, "hf": threads}, ceilings=ceilings)


def _compare(engines: dict[str, Any], path: Any, batch_sizes: list[int], max_tokens: int,
             json_lines: bool, profile: bool, repeat: int, threads: dict[str, int],
             ceilings: bool) -> None:
    """The runs and the report; ``threads`` sets torch's threads per system (rank 0 of a split
    engine shares the cores that transformers has alone)."""
    import torch

    from minisgl_core.bench import ceilings as roof
    from minisgl_core.bench.profile import format_profile, profile_decode

    def use(system: str) -> None:
        torch.set_num_threads(threads[system])

    def engine_run(label: str, prompts: list[list[int]], tokens: int) -> tuple[float, int]:
        use("engine")
        return run_engine(engines[label], prompts, tokens)

    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    tok = next(iter(engines.values())).tokenizer
    encoded = {b: [tok.encode(p) for p in _prompts(b)] for b in batch_sizes}
    best_engine: dict[tuple[str, int], tuple[float, int]] = {}
    for label in engines:
        engine_run(label, encoded[batch_sizes[0]][:1], 4)  # warm-up
        for b in batch_sizes:
            best_engine[label, b] = engine_run(label, encoded[b], max_tokens)
    peak = _peak_rss_mib()  # the engines alone: transformers' model is not loaded yet
    host = None
    if ceilings or profile:  # the profile's weight-bytes time is at this run's bandwidth
        use("engine")
        host = roof.measure()
        say(host.line())
    if profile and host is not None:
        use("engine")
        for label, engine in engines.items():
            say(format_profile(label, [profile_decode(engine, encoded[b], top=6,
                                                      read_gb_s=host.read_gb_s)
                                       for b in batch_sizes]))
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    use("hf")
    run_hf(hf, tok, encoded[batch_sizes[0]][:1], 4)  # warm-up
    best_hf: dict[int, tuple[float, int]] = {}
    for i in range(repeat):
        for b in batch_sizes:
            if i > 0:
                for label in engines:
                    best_engine[label, b] = min(best_engine[label, b],
                                                engine_run(label, encoded[b], max_tokens))
            use("hf")
            best_hf[b] = min(best_hf.get(b, (float("inf"), 0)),
                             run_hf(hf, tok, encoded[b], max_tokens))
    results = []
    for b in batch_sizes:
        hs, hn = best_hf[b]
        for label, engine in engines.items():
            es, en = best_engine[label, b]
            ceiling, bound = 0.0, ""
            if host is not None:
                ceiling, bound = roof.model_cost(engine.model).roofline(host, b)
            r = Result(b, max_tokens, en / es, hn / hs, (en / es) / (hn / hs), es, hs, peak,
                       label, ceiling, 100 * (en / es) / ceiling if ceiling else 0.0, bound)
            results.append(r)
            if json_lines:
                print(json.dumps(asdict(r)), flush=True)
    if not json_lines:
        print(markdown(results))


if __name__ == "__main__":
    main(None, [1, 8, 32], 64, json_lines=False, profile="--profile" in sys.argv)


def offline_command(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    batch_size: Annotated[list[int] | None, typer.Option(help="Batch sizes (repeat).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens generated per request.")] = 64,
    tp: Annotated[int, typer.Option(
        min=1, help="Split the engine over N tensor-parallel ranks on this host.")] = 1,
    quantization: Annotated[list[str] | None, typer.Option(
        help="Engine weights: fp32, int8, int8-wo or int4 (repeat to run several, interleaved)."
    )] = None,
    dtype: Annotated[list[str] | None, typer.Option(
        help="float32, bfloat16 or auto (repeat to run several, interleaved).")] = None,
    profile: Annotated[bool, typer.Option(
        help="Break a decode step at each batch size into the weights' bytes at the measured "
        "read bandwidth and named overheads (attention, norms, rotary, sampling, Python...)."
    )] = False,
    ceilings: Annotated[bool, typer.Option(
        help="Measure the host's ceilings and report each figure as a share of them.")] = True,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per system; the best counts.")] = 3,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    compile_: Annotated[bool, typer.Option(
        "--compile/--no-compile",
        help="Run every mode eager and with its decode step compiled, side by side.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Offline engine throughput (no server) for a few batch sizes, against transformers."""
    chosen = options.quantizations(quantization or ["fp32"])
    main(model=model, batch_sizes=batch_size or [1, 8, 32], max_tokens=max_tokens,
         json_lines=json_, tp=tp, quantization=chosen, profile=profile, ceilings=ceilings,
         repeat=repeat, threads=threads, dtypes=options.dtypes(dtype or ["float32"]),
         compile_step=compile_)
