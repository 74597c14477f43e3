"""Prefill attention per layer: a chunk's requests in groups (engine/attention.py, a request of
SOLO_ROWS new tokens or more in a call of its own: the native kernel, kernels/prefill_attention.py,
or SDPA) against all of them in one padded SDPA call, side by side in one run, for the default
model's heads (9 query, 3 KV, 64 wide); then the engine's eager prefill of a few long prompts
with the native kernel and with SDPA, interleaved (best of each).

A chunk is written ``start+new,start+new,...``: ``512+431,0+81`` is the last 431 tokens of a
943-token prompt (512 of it cached) with the first 81 of the next one.

    python benchmarks/prefill_attention.py [--threads 2] [--dtype bfloat16]
                                           [--chunk 512+431,0+81 ...] [--heads 9,3,64]
                                           [--prompts 4] [--prompt-len 1000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch
from elementwise import engine_prefill_ms  # benchmarks/, beside this script

from minisgl_core.engine import attention
from minisgl_core.engine.attention import Workspace, build_metadata, paged_attention
from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.kernels import prefill_attention
from minisgl_core.plugin.model_lookup import resolve

PAGE = 16
CHUNKS = ("0+512", "512+431,0+81", "512+350,0+162", "0+40,0+35,0+52,0+30", "300+64,0+448")


def _ms(run: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--chunk", nargs="+", default=list(CHUNKS))
    parser.add_argument("--heads", default="9,3,64", help="query heads, KV heads, head width")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=4, help="0: no engine prefill")
    parser.add_argument("--prompt-len", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hq, hkv, d = (int(x) for x in args.heads.split(","))
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    grouped = attention.SOLO_ROWS
    print(f"{args.dtype}, heads {args.heads}, {args.threads} threads, best of {args.repeat}\n")
    print("| chunk (start+new, ...) | grouped, native ms | grouped, SDPA ms | one padded call ms |")
    print("| --- | ---: | ---: | ---: |")
    for chunk in args.chunk:
        seqs = [tuple(int(x) for x in part.split("+")) for part in chunk.split(",")]
        pages, first = [], 1  # page 0 is the scratch page padding points at
        for start, new in seqs:
            n = -(-(start + new) // PAGE)
            pages.append(list(range(first, first + n)))
            first += n
        k_cache = torch.randn(first * PAGE, hkv, d, generator=gen).to(dtype)
        v_cache = torch.randn(first * PAGE, hkv, d, generator=gen).to(dtype)
        rows = sum(new for _, new in seqs)
        q = torch.randn(rows, hq, d, generator=gen).to(dtype)
        k = torch.randn(rows, hkv, d, generator=gen).to(dtype)
        v = torch.randn(rows, hkv, d, generator=gen).to(dtype)
        ws = Workspace(hkv, d, dtype, "cpu")
        prefill = [(p, start, new) for p, (start, new) in zip(pages, seqs, strict=True)]
        times = []
        for solo, native in ((grouped, True), (grouped, False), (1 << 30, False)):
            attention.SOLO_ROWS = solo  # 1 << 30: all in one padded call
            prefill_attention.preferred = lambda *a, use=native: use
            meta = build_metadata([], prefill, PAGE, "cpu")
            times.append(_ms(partial(paged_attention, q, k, v, k_cache, v_cache, meta, ws),
                             args.repeat))
        attention.SOLO_ROWS = grouped
        print(f"| {chunk} | {times[0]:.2f} | {times[1]:.2f} | {times[2]:.2f} |")
    if args.prompts:
        resolved = resolve(None)
        engine = Engine(EngineConfig(model=resolved.path, num_threads=args.threads,
                                     cache="naive", dtype=args.dtype, quantization="auto"),
                        resolved.model_class)
        best = {True: float("inf"), False: float("inf")}
        engine_prefill_ms(engine, args.prompts, args.prompt_len, "warm")
        for r in range(3):
            for native in best:
                prefill_attention.preferred = lambda *a, use=native: use
                ms = engine_prefill_ms(engine, args.prompts, args.prompt_len, f"{r}{native}")
                best[native] = min(best[native], ms)
        print(f"\nprefill of {args.prompts} x {args.prompt_len} tokens, eager "
              f"({engine.info()['quantization']}, {args.dtype}), ms, best of 3: "
              f"native {best[True]:.1f}, SDPA {best[False]:.1f}")


if __name__ == "__main__":
    main()
