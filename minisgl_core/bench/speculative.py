"""N-gram speculation benchmark: a repeating and a non-repeating workload, one stream and eight,
with and without ``speculative="ngram"``, in one run (``minisgl bench speculative``).

The repeating workload is a chat whose user turn holds a paragraph and asks for it back with one
word changed (the answer quotes the prompt); the non-repeating one asks for short stories. Every
request is greedy with EOS ignored, so both engines produce the same tokens (checked) and the
same number of them. Throughput is generated tokens over wall time; acceptance is accepted over
proposed draft tokens.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer

from minisgl_core.bench.options import JsonOpt, dtypes, quantizations
from minisgl_core.sampling import SamplingParams

WORKLOADS = ("repeating", "stories")
_TEXTS = (
    "The river rises in the hills above the town and runs past the mill, the church and the old "
    "stone bridge before it reaches the sea. In spring the water is high and brown; in summer "
    "children swim below the bridge, and in autumn the leaves of the willows cover it.",
    "To reset the router, unplug it for ten seconds, plug it back in and wait until the green "
    "light stops blinking. Then open the settings page, sign in with the password printed on "
    "the label, and choose a new name and a new password for the wireless network.",
    "Our library opens at nine on weekdays and at ten on Saturdays. Books may be borrowed for "
    "three weeks and renewed twice, unless another reader has reserved them. Late returns cost "
    "ten cents a day, and lost cards are replaced at the front desk for one dollar.",
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total "
    "/ len(values)\n\n\ndef variance(values):\n    m = mean(values)\n    total = 0\n    for v in "
    "values:\n        total += (v - m) ** 2\n    return total / len(values)\n",
)
_STORIES = ("a lighthouse keeper who finds a map", "a robot learning to bake bread",
            "two foxes in a snowy forest", "a girl who can talk to clocks",
            "a sailor lost in a fog", "a dragon afraid of heights",
            "a city where it never stops raining", "an old violin with a secret")


@dataclass(frozen=True)
class SpecResult:
    """One (workload, concurrency, speculation) run."""

    workload: str
    concurrency: int
    speculative: bool
    tokens: int
    wall_s: float
    tokens_per_s: float
    drafted: int
    accepted: int
    outputs: tuple[tuple[int, ...], ...]


def prompts(tokenizer: Any, workload: str, n: int) -> list[list[int]]:
    """``n`` chat prompts of ``workload``."""
    out = []
    for i in range(n):
        if workload == "repeating":
            text = _TEXTS[i % len(_TEXTS)]
            user = ("Here is a text:\n\n" + text + "\n\nWrite the same text again, word for word, "
                    "but with the first word in capitals.")
        else:
            user = f"Write a short story about {_STORIES[i % len(_STORIES)]}."
        ids = tokenizer.apply_chat_template([{"role": "user", "content": user}],
                                            add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 BatchEncoding
            ids = ids["input_ids"]
        out.append([int(t) for t in ids])
    return out


def run_one(engine: Any, batch: Sequence[Sequence[int]], concurrency: int,
            max_tokens: int) -> tuple[list[tuple[int, ...]], float]:
    """Serve ``batch`` ``concurrency`` at a time (a new one as one ends); outputs and wall s."""
    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    tokens: dict[int, list[int]] = {}
    queue = list(range(len(batch)))
    live: set[int] = set()
    start = time.perf_counter()
    for _ in range(10_000_000):
        while queue and len(live) < concurrency:
            i = queue.pop(0)
            engine.add_request(f"spec-{id(batch)}-{i}", batch[i], sp)
            live.add(i)
        if not live:
            break
        for o in engine.step():
            i = int(o.request_id.rsplit("-", 1)[1])
            tokens.setdefault(i, []).extend(o.token_ids)
            if o.finish_reason is not None:
                live.discard(i)
    return [tuple(tokens[i]) for i in range(len(batch))], time.perf_counter() - start


def run(model: str | None = None, *, requests: int = 8, max_tokens: int = 96,
        concurrencies: Sequence[int] = (1, 8), k: int = 4, threads: int | None = None,
        repeat: int = 3, ceilings: bool = True, say: Any = print,
        quantization: str | None = None, dtype: str = "auto",
        compile_step: bool = False, lookup_min: int = 2) -> list[SpecResult]:
    """Every workload x concurrency, plain and speculative interleaved ``repeat`` times on two
    engines of one model (``quantization``, ``dtype`` and a compiled decode step as given,
    the graphs ready before anything is timed); the fastest run of each counts (the host is
    shared and noisy)."""
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import resolve

    resolved = resolve(model)
    engines = {spec: Engine(EngineConfig(model=str(resolved.path), num_threads=threads,
                                         speculative="ngram" if spec else None,
                                         num_speculative_tokens=k, quantization=quantization,
                                         prompt_lookup_min=lookup_min,
                                         dtype=dtype, compile=compile_step),
                                resolved.model_class)
               for spec in (False, True)}
    for engine in engines.values():
        if engine.compiled is not None and not engine.compiled.wait():
            say(f"the decode step did not compile: {engine.compiled.status()}")
    say(f"engine: {engines[False].info()['dtype']}, quantization {quantization or 'none'}, "
        f"decode step {'compiled' if compile_step else 'eager'}; k = {k}, n-grams of "
        f"{lookup_min} to 4 tokens looked up")
    if ceilings:
        from minisgl_core.bench.ceilings import measure

        say(f"model {resolved.path}; " + measure().line())
    tok = engines[False].tokenizer
    warm = tok.encode("Hello there, how are you today? Hello there, how are you today?")
    for engine in engines.values():  # first-call costs out of the way
        run_one(engine, [warm, warm], 2, 8)
    results = []
    for workload in WORKLOADS:
        batch = prompts(tok, workload, requests)
        for conc in concurrencies:
            best: dict[bool, SpecResult] = {}
            for _ in range(repeat):
                for spec, engine in engines.items():
                    before = engine.stats()
                    outs, wall = run_one(engine, batch, conc, max_tokens)
                    after = engine.stats()
                    n = sum(map(len, outs))
                    r = SpecResult(workload, conc, spec, n, wall, n / wall,
                                   after.spec_draft_tokens - before.spec_draft_tokens,
                                   after.spec_accepted_tokens - before.spec_accepted_tokens,
                                   tuple(outs))
                    if spec not in best or r.wall_s < best[spec].wall_s:
                        best[spec] = r
            for spec in (False, True):
                r = best[spec]
                say(f"  {workload:9s} c={conc} {'ngram' if spec else 'plain'}: "
                    f"{r.tokens_per_s:7.1f} tok/s, accepted {r.accepted}/{r.drafted}")
                results.append(r)
    return results


def markdown(results: Sequence[SpecResult]) -> str:
    """One row per run, then each pair's speed-up, acceptance and token equality."""
    lines = ["| workload | concurrency | speculation | tokens | wall s | tok/s | accepted / "
             "drafted |", "|---|---:|---|---:|---:|---:|---:|"]
    for r in results:
        rate = f"{r.accepted}/{r.drafted} ({r.accepted / r.drafted:.0%})" if r.drafted else "-"
        lines.append(f"| {r.workload} | {r.concurrency} | {'ngram' if r.speculative else 'off'} "
                     f"| {r.tokens} | {r.wall_s:.1f} | {r.tokens_per_s:.1f} | {rate} |")
    lines.append("")
    for plain, spec in _pairs(results):
        same = "identical" if plain.outputs == spec.outputs else "DIFFERENT"
        lines.append(f"- {plain.workload}, concurrency {plain.concurrency}: "
                     f"{spec.tokens_per_s / plain.tokens_per_s:.2f}x with ngram; greedy "
                     f"outputs {same}")
    return "\n".join(lines)


def _pairs(results: Sequence[SpecResult]) -> list[tuple[SpecResult, SpecResult]]:
    by = {(r.workload, r.concurrency, r.speculative): r for r in results}
    return [(by[w, c, False], by[w, c, True]) for (w, c, s) in by if s and (w, c, False) in by]


def main(model: str | None = None, requests: int = 8, max_tokens: int = 96,
         concurrencies: Sequence[int] = (1, 8), k: int = 4, threads: int | None = None,
         repeat: int = 3, json_lines: bool = False, quantization: str | None = None,
         dtype: str = "auto", compile_step: bool = False, lookup_min: int = 2) -> int:
    """Print the table (or JSON lines); exit status 1 if speculation changed a greedy output."""
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    results = run(model, requests=requests, max_tokens=max_tokens, concurrencies=concurrencies,
                  k=k, threads=threads, repeat=repeat, say=say, quantization=quantization,
                  dtype=dtype, compile_step=compile_step, lookup_min=lookup_min)
    if json_lines:
        for r in results:
            row = asdict(r)
            del row["outputs"]
            print(json.dumps(row), flush=True)
    else:
        print(markdown(results))
    return int(any(p.outputs != s.outputs for p, s in _pairs(results)))


def speculative_command(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    requests: Annotated[int, typer.Option(min=1, help="Requests per workload.")] = 8,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request.")] = 96,
    concurrency: Annotated[list[int] | None, typer.Option(
        help="Requests in flight at once (repeat).")] = None,
    num_speculative_tokens: Annotated[int, typer.Option(min=1, help="Draft tokens (k).")] = 4,
    prompt_lookup_min: Annotated[int, typer.Option(
        min=1, max=4, help="Shortest suffix n-gram looked up.")] = 2,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per system; the best counts.")] = 3,
    quantization: Annotated[str | None, typer.Option(
        help="Engine weights: int8, int8-wo or int4 (default: the dtype's).")] = None,
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or auto.")] = "auto",
    compile_: Annotated[bool, typer.Option(
        "--compile/--no-compile", help="Both engines with their decode step compiled.")] = False,
    json_: JsonOpt = False,
) -> None:
    """N-gram speculation on a repeating and a story workload, with and without it; exit 1 if
    it changed a greedy output."""
    (scheme,) = quantizations([quantization or "fp32"])
    dtypes([dtype])
    raise typer.Exit(main(model=model, requests=requests, max_tokens=max_tokens,
                          concurrencies=concurrency or [1, 8], k=num_speculative_tokens,
                          threads=threads, repeat=repeat, json_lines=json_,
                          quantization=scheme, dtype=dtype, compile_step=compile_,
                          lookup_min=prompt_lookup_min))
