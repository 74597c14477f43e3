"""`minisgl bench quality`: what quantization costs in quality against fp32, on stock text.

Perplexity: the text is Python's own ``pydoc_data.topics`` (the help topics of the running
Python, English prose with code), built as ``"\\n\\n".join(topics[k] for k in sorted(topics))``,
encoded with the model's tokenizer without special tokens, cut to its first ``tokens`` (4,096)
tokens. The engine's model runs it as one sequence, in chunks of ``CHUNK`` tokens over its paged
KV cache, and the perplexity is ``exp(mean(-log p(token i | tokens < i)))`` over tokens 2..N.
Agreement: 16 chats (the offline benchmark's prompts), 32 greedy tokens each, EOS ignored; the
share of tokens equal to fp32's before the first difference, and how many chats match entirely.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

CHUNK = 512  # tokens per forward: bounds the [CHUNK, vocab] fp32 logits (100 MB for 49k)
TARGET_PPL_RATIO = 1.03  # int8 perplexity within 3% of fp32's
# the other modes' targets (perplexity at most this times fp32's): weight-only keeps activations
TARGETS = {"int8": TARGET_PPL_RATIO, "int8-wo": 1.005, "int4": 1.05}


@dataclass(frozen=True)
class Quality:
    """One engine's figures (agreement fields are against fp32; 1.0 for fp32 itself)."""

    system: str
    tokens: int
    perplexity: float
    agreement: float  # share of greedy tokens equal to fp32's up to each chat's first difference
    chats_equal: int  # chats whose 32 greedy tokens all equal fp32's
    chats: int
    paris: bool  # "What is the capital of France?" is answered with Paris
    answer: str


def corpus_text() -> str:
    """The help topics of the running Python, in sorted order, blank-line separated."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def perplexity(engine: Any, ids: Sequence[int]) -> float:
    """The perplexity of ``ids`` as one sequence under the engine's model (its own forward)."""
    import torch

    from minisgl_core.engine.attention import build_metadata

    n = len(ids)
    pages = engine.allocator.alloc(-(-n // engine.page_size))
    nll = 0.0
    try:
        with torch.inference_mode():
            for start in range(0, n - 1, CHUNK):
                stop = min(start + CHUNK, n - 1)  # predict tokens start+1 .. stop
                meta = build_metadata([], [(pages, start, stop - start)], engine.page_size,
                                      engine.device)
                x = torch.tensor(ids[start:stop], device=engine.device)
                hidden = engine.model.forward(x, meta, engine.kv, engine.workspace)
                logp = torch.log_softmax(engine.model.logits(hidden).float(), -1)
                nxt = torch.tensor(ids[start + 1:stop + 1], device=engine.device)
                nll -= float(logp.gather(1, nxt[:, None]).sum())
    finally:
        engine.allocator.free(pages)
    return math.exp(nll / (n - 1))


def greedy_chats(engine: Any, chats: Sequence[str], max_tokens: int,
                 ignore_eos: bool = True) -> list[list[int]]:
    """Each chat's greedy continuation, all chats batched together."""
    from minisgl_core.wire.schema import SamplingParams

    tok = engine.tokenizer
    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=ignore_eos)
    for i, chat in enumerate(chats):
        text = tok.apply_chat_template([{"role": "user", "content": chat}],
                                       add_generation_prompt=True, tokenize=False)
        engine.add_request(f"quality-{i}", tok.encode(text, add_special_tokens=False), sp)
    out: dict[str, list[int]] = {f"quality-{i}": [] for i in range(len(chats))}
    for step in engine.run_until_idle():
        out[step.request_id].extend(step.token_ids)
    return [out[f"quality-{i}"] for i in range(len(chats))]


def _prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def main(model: str | None, quantization: Sequence[str | None], tokens: int = 4096,
         max_tokens: int = 32, json_lines: bool = False, threads: int | None = None) -> int:
    """Measure fp32 and each quantization; print a table (or JSON lines); 1 if a target fails."""
    import os
    from pathlib import Path

    import torch

    from minisgl_core.bench.engine_vs_hf import PROMPTS
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import resolve

    torch.set_num_threads(threads or os.cpu_count() or 1)
    resolved = resolve(model)
    path = Path(resolved.path)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    systems = [None, *[q for q in quantization if q is not None]]
    results: list[Quality] = []
    reference: list[list[int]] = []
    ids: list[int] = []
    for q in systems:
        engine = Engine(EngineConfig(model=str(path), cache="naive", quantization=q,
                                     num_threads=torch.get_num_threads()),
                        resolved.model_class)
        if not ids:
            ids = list(engine.tokenizer.encode(corpus_text(), add_special_tokens=False))[:tokens]
            say(f"model {path.name}: perplexity over the first {len(ids)} tokens of "
                f"pydoc_data.topics (Python {sys.version.split()[0]}), greedy agreement on "
                f"{len(PROMPTS)} chats x {max_tokens} tokens")
        ppl = perplexity(engine, ids)
        outs = greedy_chats(engine, PROMPTS, max_tokens)
        reference = reference or outs
        same = [_prefix(a, b) for a, b in zip(outs, reference, strict=True)]
        (answer,) = greedy_chats(engine, ["What is the capital of France?"], 16, False)
        text = engine.tokenizer.decode(answer, skip_special_tokens=True)
        results.append(Quality(q or "fp32", len(ids), ppl, sum(same) / (max_tokens * len(outs)),
                               sum(s == max_tokens for s in same), len(outs),
                               "Paris" in text, text.strip()))
        del engine
    ok = all(r.paris for r in results) and all(
        r.perplexity <= TARGETS.get(r.system, TARGET_PPL_RATIO) * results[0].perplexity
        for r in results)
    if json_lines:
        for r in results:
            print(json.dumps(asdict(r)), flush=True)
    else:
        print(markdown(results))
    return 0 if ok else 1


def markdown(results: Sequence[Quality]) -> str:
    """The results as a markdown table, perplexity also relative to fp32's."""
    base = results[0].perplexity
    lines = ["| engine | perplexity | vs fp32 | greedy agreement | chats equal | Paris |",
             "| :--- | ---: | ---: | ---: | ---: | :--- |"]
    for r in results:
        lines.append(f"| {r.system} | {r.perplexity:.3f} | "
                     f"{100 * (r.perplexity / base - 1):+.2f}% | {100 * r.agreement:.1f}% | "
                     f"{r.chats_equal}/{r.chats} | "
                     f"{'yes' if r.paris else 'no'}: {r.answer!r} |")
    return "\n".join(lines)
