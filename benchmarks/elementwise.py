"""The decoder layer's elementwise steps, torch's ops against one native pass each
(kernels/elementwise.py), side by side in one run: each step alone at the default model's
shapes, and the engine's prefill of a few long prompts with the native passes on and off,
interleaved (best of each).

    python benchmarks/elementwise.py [--threads 2] [--dtype bfloat16] [--rows 1 32 512]
                                     [--prompts 4] [--prompt-len 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.engine.models.decoder import rms_norm, rotary, swiglu
from minisgl_core.kernels import elementwise
from minisgl_core.plugin.model_lookup import resolve
from minisgl_core.wire.schema import SamplingParams


def _us(run: Callable[[], object], n: int = 50) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            run()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def _steps(dtype: torch.dtype, rows: int) -> dict[str, Callable[[], object]]:
    """Each step on the default model's shapes (hidden 576, 9 + 3 heads of 64, inter 1536)."""
    x, w = torch.randn(rows, 576).to(dtype), torch.randn(576)
    qkv = torch.randn(rows, 15 * 64).to(dtype)
    qk = qkv[:, :12 * 64].view(rows, 12, 64)
    cos, sin = (torch.randn(rows, 1, 64).to(dtype) for _ in range(2))
    gate_up = torch.randn(rows, 3072).to(dtype)
    return {"RMSNorm": lambda: rms_norm(x, w.to(dtype), w, 1e-5),
            "rotary": lambda: rotary(qk, cos, sin), "SwiGLU": lambda: swiglu(gate_up)}


def engine_prefill_ms(engine: Engine, prompts: int, length: int, tag: str) -> float:
    """The engine's prefill of ``prompts`` distinct prompts of ``length`` tokens, ms."""
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    for i in range(prompts):
        engine.add_request(f"{tag}{i}", [(7 * j + 13 * i) % 40000 + 100 for j in range(length)],
                           params)
    start = time.perf_counter()
    for _ in range(8 * prompts * length):  # bounded: a chunk a step
        if not engine.requests:
            break
        engine.step()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 32, 512])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    print(f"{args.dtype}, {args.threads} threads, us per call (best of 5 x 50)")
    print("| rows | step | torch | native |\n| ---: | :--- | ---: | ---: |")
    for rows in args.rows:
        for name, run in _steps(dtype, rows).items():
            elementwise.ENABLED = False
            torch_us = _us(run)
            elementwise.ENABLED = True
            print(f"| {rows} | {name} | {torch_us:.1f} | {_us(run):.1f} |")
    resolved = resolve(None)
    engine = Engine(EngineConfig(model=resolved.path, num_threads=args.threads, cache="naive",
                                 dtype=args.dtype, quantization="auto"), resolved.model_class)
    info = engine.info()
    best = {False: float("inf"), True: float("inf")}
    engine_prefill_ms(engine, args.prompts, args.prompt_len, "warm")
    for r in range(args.repeat):
        for native in (False, True):
            elementwise.ENABLED = native
            ms = engine_prefill_ms(engine, args.prompts, args.prompt_len, f"{r}{native}")
            best[native] = min(best[native], ms)
    elementwise.ENABLED = True
    print(f"prefill of {args.prompts} x {args.prompt_len} tokens, eager ({info['quantization']}, "
          f"{info['dtype']}), "
          f"ms, best of {args.repeat}: torch's ops {best[False]:.1f}, native {best[True]:.1f}")


if __name__ == "__main__":
    main()
