"""`minisgl bench quality`: what quantization costs in quality against fp32, on stock text.

Perplexity: the text is Python's own ``pydoc_data.topics`` (the help topics of the running
Python, English prose with code), built as ``"\\n\\n".join(topics[k] for k in sorted(topics))``,
encoded with the model's tokenizer without special tokens, cut to its first ``tokens`` (4,096)
tokens. The engine's model runs it as one sequence, in chunks of ``CHUNK`` tokens over its paged
KV cache, and the perplexity is ``exp(mean(-log p(token i | tokens < i)))`` over tokens 2..N.
Agreement: 16 chats (the offline benchmark's prompts), 32 greedy tokens each, EOS ignored; the
share of tokens equal to fp32's before the first difference, and how many chats match entirely.

With ``peer="llamacpp"`` every engine is also measured as llama.cpp's ``llama-perplexity``
measures (``LLAMACPP_CTX``-token chunks, each on its own, the second half of each scored), and
llama.cpp itself runs on the default model's GGUF (Q4_1) and on the Q8_0 written from it, on
the same tokens: its figure and ours are the same quantity, so they compare.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer

from minisgl_core.bench.options import JsonOpt, fail, quantizations
from minisgl_core.bench.wo_kernels import SCHEMES

CHUNK = 512  # tokens per forward: bounds the [CHUNK, vocab] fp32 logits (100 MB for 49k)
LLAMACPP_CTX = 512  # llama-perplexity's default context, the chunk of its method
TARGET_PPL_RATIO = 1.03  # int8 perplexity within 3% of fp32's
# the other modes' targets (perplexity at most this times fp32's): weight-only keeps activations
# (a weight-only mode with bf16 activations, "bf16-int4", is held to its scheme's)
TARGETS = {"int8": TARGET_PPL_RATIO, "int8-wo": 1.005, "int4": 1.05, "bf16": 1.005,
           "kv-int8": 1.01}  # int8 KV pages (--kv-cache-dtype int8): within 1%


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
    perplexity_llamacpp: float | None = None  # by llama-perplexity's method, where asked


@dataclass(frozen=True)
class PeerPerplexity:
    """llama.cpp's own perplexity of a GGUF on the same tokens, by its method."""

    system: str  # "llama.cpp Q4_1"
    tokens: int
    perplexity: float


def corpus_text() -> str:
    """The help topics of the running Python, in sorted order, blank-line separated."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def _nll(engine: Any, ids: Sequence[int], first: int = 0) -> tuple[float, int]:
    """Summed -log p(ids[i+1] | ids[:i+1]) for i in [first, n-1), ``ids`` as one sequence
    under the engine's model (its own forward), and how many tokens that scored."""
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
                if stop <= first:
                    continue  # context only
                skip = max(first - start, 0)
                logp = torch.log_softmax(engine.model.logits(hidden[skip:]).float(), -1)
                nxt = torch.tensor(ids[start + skip + 1:stop + 1], device=engine.device)
                nll -= float(logp.gather(1, nxt[:, None]).sum())
    finally:
        engine.allocator.free(pages)
    return nll, n - 1 - first


def perplexity(engine: Any, ids: Sequence[int]) -> float:
    """The perplexity of ``ids`` as one sequence under the engine's model (its own forward)."""
    nll, count = _nll(engine, ids)
    return math.exp(nll / count)


def llamacpp_way_perplexity(engine: Any, ids: Sequence[int], n_ctx: int = LLAMACPP_CTX
                            ) -> float:
    """The perplexity as llama-perplexity computes it: ``ids`` cut into ``n_ctx``-token chunks
    (a shorter tail dropped), each one sequence on its own, scoring the tokens after its first
    half (``n_ctx - n_ctx // 2 - 1`` a chunk). The model adds no BOS, as llama.cpp there."""
    total, count = 0.0, 0
    for c in range(len(ids) // n_ctx):
        nll, n = _nll(engine, ids[c * n_ctx:(c + 1) * n_ctx], n_ctx // 2)
        total, count = total + nll, count + n
    return math.exp(total / count)


def llamacpp_perplexity(gguf: str, text: str, tokens: int, threads: int,
                        n_ctx: int = LLAMACPP_CTX) -> float:
    """llama.cpp's own ``llama-perplexity`` on ``gguf`` over ``text`` (written to a file),
    ``tokens // n_ctx`` chunks of ``n_ctx`` tokens; its final estimate."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    from minisgl_core.bench.peers import peer_venv

    exe = peer_venv("llamacpp", program="llama-perplexity") / "bin" / "llama-perplexity"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "text.txt"
        path.write_text(text)
        done = subprocess.run([str(exe), "--model", gguf, "--file", str(path), "--ctx-size",
                               str(n_ctx), "--chunks", str(tokens // n_ctx), "--threads",
                               str(threads), "--batch-size", str(n_ctx)],
                              capture_output=True, text=True)
    found = re.search(r"Final estimate: PPL = ([0-9.]+)", done.stdout + done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"llama-perplexity failed ({done.returncode}):\n"
                           f"{(done.stdout + done.stderr)[-2000:]}")
    return float(found.group(1))


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
         max_tokens: int = 32, json_lines: bool = False, threads: int | None = None,
         bf16: bool = False, peer: str | None = None, kv_int8: bool = False) -> int:
    """Measure fp32, bf16 if asked, and each quantization (in fp32); with ``kv_int8`` fp32 (and
    bf16) with int8 KV pages; with ``peer="llamacpp"`` llama.cpp too. Print a table (or JSON
    lines); 1 if a target fails."""
    import os
    from pathlib import Path

    import torch

    from minisgl_core.bench.engine_vs_hf import PROMPTS
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import resolve

    if peer not in (None, "llamacpp"):
        raise ValueError(f"bench quality knows one peer, llamacpp, got {peer!r}")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    resolved = resolve(model)
    path = Path(resolved.path)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    # (label, quantization, dtype, KV dtype); fp32 first: the others are compared with it
    systems = [("fp32", None, "float32", "auto"),
               *([("bf16", None, "bfloat16", "auto")] if bf16 else []),
               *[(q, q, "float32", "auto") for q in quantization if q is not None],
               # the weight-only schemes with bf16 activations too (what --dtype auto runs them
               # in where bf16 measures faster); int8 W8A8 always quantizes fp32 inputs
               *[(f"bf16-{q}", q, "bfloat16", "auto") for q in quantization
                 if bf16 and q in SCHEMES],
               *([("kv-int8", None, "float32", "int8")] if kv_int8 else []),
               *([("bf16-kv-int8", None, "bfloat16", "int8")] if kv_int8 and bf16 else [])]
    results: list[Quality] = []
    reference: list[list[int]] = []
    ids: list[int] = []
    text = ""
    for label, q, dtype, kv in systems:
        engine = Engine(EngineConfig(model=str(path), cache="naive", quantization=q,
                                     dtype=dtype, num_threads=torch.get_num_threads(),
                                     kv_cache_dtype=kv),
                        resolved.model_class)
        if not ids:
            ids = list(engine.tokenizer.encode(corpus_text(), add_special_tokens=False))[:tokens]
            text = engine.tokenizer.decode(ids)
            say(f"model {path.name}: perplexity over the first {len(ids)} tokens of "
                f"pydoc_data.topics (Python {sys.version.split()[0]}), greedy agreement on "
                f"{len(PROMPTS)} chats x {max_tokens} tokens")
        ppl = perplexity(engine, ids)
        way = llamacpp_way_perplexity(engine, ids) if peer else None
        outs = greedy_chats(engine, PROMPTS, max_tokens)
        reference = reference or outs
        same = [_prefix(a, b) for a, b in zip(outs, reference, strict=True)]
        (answer,) = greedy_chats(engine, ["What is the capital of France?"], 16, False)
        answer_text = engine.tokenizer.decode(answer, skip_special_tokens=True)
        results.append(Quality(label, len(ids), ppl, sum(same) / (max_tokens * len(outs)),
                               sum(s == max_tokens for s in same), len(outs),
                               "Paris" in answer_text, answer_text.strip(), way))
        del engine
    peers = _llamacpp_rows(text, len(ids), torch.get_num_threads()) if peer else []
    ok = all(r.paris for r in results) and all(
        r.perplexity
        <= TARGETS.get(r.system.removeprefix("bf16-"), TARGET_PPL_RATIO) * results[0].perplexity
        for r in results)
    if json_lines:
        for row in [*results, *peers]:
            print(json.dumps(asdict(row)), flush=True)
    else:
        print(markdown(results, peers))
    return 0 if ok else 1


def _llamacpp_rows(text: str, tokens: int, threads: int) -> list[PeerPerplexity]:
    """llama.cpp's perplexity of the default model's GGUF (Q4_1) and of its Q8_0."""
    from minisgl_core.bench.peers import llamacpp_ggufs

    return [PeerPerplexity(f"llama.cpp {g.name.rsplit('.', 2)[-2]}", tokens,
                           llamacpp_perplexity(str(g), text, tokens, threads))
            for g in llamacpp_ggufs()]


def markdown(results: Sequence[Quality], peers: Sequence[PeerPerplexity] = ()) -> str:
    """The results as a markdown table, perplexity also relative to fp32's; with peers, a
    column of perplexity by llama.cpp's method and their rows."""
    base = results[0].perplexity
    way = bool(peers) or any(r.perplexity_llamacpp is not None for r in results)
    head, rule = (" perplexity, llama.cpp's method |", " ---: |") if way else ("", "")
    lines = ["| engine | perplexity | vs fp32 | greedy agreement | chats equal | Paris |" + head,
             "| :--- | ---: | ---: | ---: | ---: | :--- |" + rule]
    for r in results:
        cell = f" {r.perplexity_llamacpp:.3f} |" if r.perplexity_llamacpp is not None else " |"
        lines.append(f"| {r.system} | {r.perplexity:.3f} | "
                     f"{100 * (r.perplexity / base - 1):+.2f}% | {100 * r.agreement:.1f}% | "
                     f"{r.chats_equal}/{r.chats} | "
                     f"{'yes' if r.paris else 'no'}: {r.answer!r} |{cell if way else ''}")
    for p in peers:
        lines.append(f"| {p.system} | | | | | | {p.perplexity:.3f} |")
    return "\n".join(lines)


def quality_command(
    model: Annotated[str | None, typer.Option(help="Model directory or name.")] = None,
    quantization: Annotated[list[str] | None, typer.Option(
        help="int8, int8-wo or int4: measure it against fp32 (fp32 alone without).")] = None,
    tokens: Annotated[int, typer.Option(min=2, help="Tokens of text for the perplexity.")] = 4096,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (all cores).")] = None,
    bf16: Annotated[bool, typer.Option(
        help="Also measure the model in bf16, and int8-wo / int4 with bf16 activations.")
    ] = False,
    peer: Annotated[str | None, typer.Option(
        help="llamacpp: also llama.cpp's own perplexity of the GGUF (Q4_1) and its Q8_0 on the "
             "same tokens, and every row by its method (`make bench-peers PEERS=llamacpp`).")
    ] = None,
    kv_cache_dtype: Annotated[str, typer.Option(
        help="int8: also fp32 (and with --bf16, bf16) with int8 KV pages.")] = "auto",
    json_: JsonOpt = False,
) -> None:
    """Perplexity on pydoc_data.topics and greedy agreement with fp32; exit 1 if a mode misses
    its target (perplexity within 3% of fp32's for int8, 0.5% for int8-wo and bf16, 5% for
    int4, 1% for int8 KV pages; "Paris" answered)."""
    if kv_cache_dtype not in ("auto", "int8"):
        raise fail(f'--kv-cache-dtype must be auto or int8, got "{kv_cache_dtype}"')
    chosen = quantizations(quantization or [])
    if peer not in (None, "llamacpp"):
        raise fail(f'--peer must be llamacpp, got "{peer}"')
    raise typer.Exit(main(model=model, quantization=chosen, tokens=tokens, json_lines=json_,
                          threads=threads, bf16=bf16, peer=peer,
                          kv_int8=kv_cache_dtype == "int8"))
