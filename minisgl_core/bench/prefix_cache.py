"""Prefix-cache benchmark: chats sharing one long system prompt, radix cache vs naive, one run.

Every request is the model's chat template over the same ~500-token system prompt and one of
``requests`` distinct user turns, greedy, EOS ignored. Both caches serve the same requests in the
same process, in two arrival patterns: ``sequential`` (each request is added when the previous
one has finished: a chat service at low load) and ``burst`` (all added at once). TTFT is the
time from ``add_request`` to the end of the step that returns the request's first token.
Prefill tokens are the prompt tokens the engine computed (admitted prompt tokens minus prefix
cache hits). The radix cache is emptied before each pattern, so its first request misses.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from minisgl_core.bench.results import percentile
from minisgl_core.sampling import SamplingParams

ARRIVALS = ("sequential", "burst")
_SENTENCES = (
    "You are a careful assistant for a company that sells garden tools and outdoor furniture.",
    "Answer in plain English, in at most three sentences, and never invent order numbers.",
    "If a customer asks about a delivery, ask for the postcode and the date of the order.",
    "Returns are accepted within thirty days when the item is unused and in its box.",
    "Lawn mowers, hedge trimmers and leaf blowers carry a two-year warranty on the motor.",
    "Wooden benches should be oiled twice a year; metal chairs need no special care.",
    "Do not discuss competitors, prices of other shops, or anything about politics.",
    "When you do not know the answer, say so and offer to pass the question to a person.",
)
_QUESTIONS = (
    "How long is the warranty on a hedge trimmer?", "Can I return a bench I already oiled?",
    "Where is my parcel?", "Do metal chairs rust in winter?", "What is your phone number?",
    "Is the leaf blower loud?", "Can I pay in three instalments?", "Do you ship to Ireland?",
)


@dataclass(frozen=True)
class PrefixResult:
    """One (cache, arrival pattern) run."""

    cache: str
    arrival: str
    requests: int
    prompt_tokens: int  # all prompts together
    prefill_tokens: int  # prompt tokens actually computed
    ttft_p50_ms: float
    ttft_p90_ms: float
    wall_s: float
    outputs: tuple[tuple[int, ...], ...]  # generated tokens per request (to compare caches)


def system_prompt(tokenizer: Any, target_tokens: int) -> str:
    """Policy-like text of about ``target_tokens`` tokens (whole sentences, cycled, numbered)."""
    parts: list[str] = []
    i = 0
    while len(tokenizer.encode(" ".join(parts))) < target_tokens:
        parts.append(f"Rule {i + 1}. {_SENTENCES[i % len(_SENTENCES)]}")
        i += 1
    return " ".join(parts)


def chat_prompts(tokenizer: Any, requests: int, system_tokens: int) -> list[list[int]]:
    """``requests`` chat prompts: one shared system message, a distinct user turn each."""
    system = system_prompt(tokenizer, system_tokens)
    out = []
    for i in range(requests):
        user = f"Customer {i + 1}: {_QUESTIONS[i % len(_QUESTIONS)]} (ticket {1000 + 37 * i})"
        ids = tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 BatchEncoding
            ids = ids["input_ids"]
        out.append([int(t) for t in ids])
    return out


def run_workload(engine: Any, prompts: Sequence[Sequence[int]], arrival: str,
                 max_tokens: int) -> tuple[list[float], list[tuple[int, ...]], int, float]:
    """TTFTs (s), generated tokens per request, prefill tokens computed and wall time (s)."""
    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    before = engine.stats()
    added: dict[str, float] = {}
    first: dict[str, float] = {}
    tokens: dict[str, list[int]] = {}
    start = time.perf_counter()

    def drain(until: str | None) -> None:
        for _ in range(1_000_000):
            if not engine.has_work() or (until is not None and until in first):
                return
            outs = engine.step()
            now = time.perf_counter()
            for o in outs:
                first.setdefault(o.request_id, now)
                tokens.setdefault(o.request_id, []).extend(o.token_ids)

    tag = f"prefix-{arrival}-{id(prompts)}"
    for i, p in enumerate(prompts):
        rid = f"{tag}-{i}"
        added[rid] = time.perf_counter()
        engine.add_request(rid, p, sp)
        if arrival == "sequential":
            drain(None)
    drain(None)
    wall = time.perf_counter() - start
    after = engine.stats()
    computed = ((after.prompt_tokens - before.prompt_tokens)
                - (after.cache_hit_tokens - before.cache_hit_tokens))
    rids = list(added)
    return ([first[r] - added[r] for r in rids], [tuple(tokens[r]) for r in rids], computed,
            wall)


def _empty_cache(engine: Any) -> None:
    cache = engine.batcher.cache
    if cache is not None:
        cache.evict(cache.num_pages)


def run(model: str | None = None, *, requests: int = 32, system_tokens: int = 500,
        max_tokens: int = 8, arrivals: Sequence[str] = ARRIVALS, threads: int | None = None,
        say: Any = print) -> list[PrefixResult]:
    """Both caches on every arrival pattern; results in run order."""
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import resolve

    resolved = resolve(model)
    path = Path(resolved.path)
    engines = {c: Engine(EngineConfig(model=str(path), cache=c, num_threads=threads),
                         resolved.model_class)
               for c in ("naive", "radix")}
    tok = engines["radix"].tokenizer
    prompts = chat_prompts(tok, requests, system_tokens)
    say(f"model {path.name}; {requests} chats, prompts {min(map(len, prompts))}-"
        f"{max(map(len, prompts))} tokens (system prompt ~{system_tokens}), {max_tokens} new")
    warm = tok.encode("Hello there, how are you today?")
    for engine in engines.values():  # first-call costs (allocations, kernels) out of the way
        run_workload(engine, [warm, warm[:-2]], "burst", 2)
    results = []
    for arrival in arrivals:
        for cache, engine in engines.items():
            _empty_cache(engine)
            ttft, outs, computed, wall = run_workload(engine, prompts, arrival, max_tokens)
            r = PrefixResult(cache, arrival, requests, sum(map(len, prompts)), computed,
                             1e3 * percentile(ttft, 50), 1e3 * percentile(ttft, 90), wall,
                             tuple(outs))
            say(f"  {cache:5s} {arrival:10s} TTFT p50 {r.ttft_p50_ms:8.1f} ms, "
                f"prefill {computed} tokens, {wall:.1f} s")
            results.append(r)
    return results


def markdown(results: Sequence[PrefixResult]) -> str:
    """A table per arrival pattern: naive, radix and the ratio."""
    lines = ["| arrival | cache | TTFT p50 ms | TTFT p90 ms | prefill tokens computed | "
             "of prompt tokens | wall s |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.arrival} | {r.cache} | {r.ttft_p50_ms:.1f} | {r.ttft_p90_ms:.1f} | "
                     f"{r.prefill_tokens} | {r.prompt_tokens} | {r.wall_s:.1f} |")
    lines.append("")
    for arrival, naive, radix in _pairs(results):
        same = "identical" if naive.outputs == radix.outputs else "DIFFERENT"
        lines.append(f"- {arrival}: TTFT p50 {naive.ttft_p50_ms / radix.ttft_p50_ms:.1f}x lower "
                     f"with radix, {naive.prefill_tokens / max(radix.prefill_tokens, 1):.1f}x "
                     f"fewer prefill tokens; greedy outputs {same}")
    return "\n".join(lines)


def _pairs(results: Sequence[PrefixResult]) -> list[tuple[str, PrefixResult, PrefixResult]]:
    by = {(r.arrival, r.cache): r for r in results}
    return [(a, by[a, "naive"], by[a, "radix"]) for a in dict.fromkeys(r.arrival for r in results)
            if (a, "naive") in by and (a, "radix") in by]


def main(model: str | None = None, requests: int = 32, system_tokens: int = 500,
         max_tokens: int = 8, arrivals: Sequence[str] = ARRIVALS, threads: int | None = None,
         json_lines: bool = False) -> int:
    """Print the table (or JSON lines); exit status 1 if radix changed any greedy output."""
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    results = run(model, requests=requests, system_tokens=system_tokens, max_tokens=max_tokens,
                  arrivals=arrivals, threads=threads, say=say)
    if json_lines:
        for r in results:
            row = asdict(r)
            del row["outputs"]
            print(json.dumps(row), flush=True)
    else:
        print(markdown(results))
    return int(any(n.outputs != r.outputs for _, n, r in _pairs(results)))
