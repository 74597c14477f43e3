"""Decode attention per layer: the native kernel (pages read in place) against gather + SDPA,
side by side in one run, for the default model's heads (9 query, 3 KV, 64 wide).

    python benchmarks/decode_attention.py [--threads 2] [--shape 32x512 ...] [--heads 9,3,64]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from minisgl_core.kernels import Workspace, sdpa_decode
from minisgl_core.kernels import attention as native_attention

PAGE = 16
SHAPES = ("1x128", "1x4096", "8x128", "32x128", "32x512", "128x256")


def _us(fn: Callable[[], object], n: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def row(dtype: torch.dtype, batch: int, length: int, hq: int, hkv: int, d: int) -> str:
    """One table row: microseconds per layer of each path, and the kernel's speed-up."""
    slots = (batch * length // PAGE + 64) * PAGE
    k = torch.randn(slots, hkv, d).to(dtype)
    v = torch.randn(slots, hkv, d).to(dtype)
    q = torch.randn(batch, hq, d).to(dtype)
    pages = torch.randperm(slots // PAGE - 1)[:batch * length // PAGE] + 1  # as the engine's
    index = (pages.view(batch, -1, 1) * PAGE + torch.arange(PAGE)).flatten()
    mask = None if batch == 1 else torch.ones(batch, 1, 1, length, dtype=torch.bool)
    ws = Workspace(hkv, d, dtype, "cpu")  # the engine's reused gather buffers
    n = max(10, 20000 // batch // max(1, length // 64))
    sdpa = _us(lambda: sdpa_decode(q, k, v, index, mask, d ** -0.5, ws), n)
    kernel = _us(lambda: native_attention.decode(q, k, v, index, mask, d ** -0.5), n)
    name = {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    return f"| {name} | {batch} x {length} | {sdpa:.0f} | {kernel:.0f} | {sdpa / kernel:.2f}x |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (all cores)")
    parser.add_argument("--shape", action="append", help="BATCHxKEYS (repeat)")
    parser.add_argument("--heads", default="9,3,64", help="query heads, KV heads, head dim")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    hq, hkv, d = (int(x) for x in args.heads.split(","))
    q = torch.zeros(1, hq, d)
    if not native_attention.usable(q, q):
        raise SystemExit("the native kernel does not run here (no library, or switched off)")
    print(f"{torch.get_num_threads()} threads, {hq} query / {hkv} KV heads of {d}; "
          "us per layer")
    print("| dtype | batch x keys | gather + SDPA | native | speed-up |")
    print("| :--- | ---: | ---: | ---: | ---: |")
    from minisgl_core.kernels import bf16_fast

    dtypes = [torch.float32] + ([torch.bfloat16] if bf16_fast() else [])
    with torch.inference_mode():
        for dtype in dtypes:
            for shape in args.shape or SHAPES:
                batch, length = (int(x) for x in shape.split("x"))
                print(row(dtype, batch, length, hq, hkv, d), flush=True)


if __name__ == "__main__":
    main()
