"""Decode attention per layer: the native kernel (pages read in place) against gather + SDPA,
side by side in one run, for the default model's heads (9 query, 3 KV, 64 wide).

    python benchmarks/decode_attention.py [--threads 2] [--shape 32x512 ...] [--heads 9,3,64]
        [--layers 30]
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


def row(dtype: torch.dtype, batch: int, length: int, hq: int, hkv: int, d: int,
        layers: int = 1) -> str:
    """One table row: microseconds per layer of each path, and the kernel's speed-up. With
    ``layers`` > 1 each layer has caches of its own, visited in turn as a step does, so the keys
    come from memory rather than from the last call's cache lines."""
    pages_each = -(-length // PAGE)
    slots = (batch * pages_each + 64) * PAGE
    ks = [torch.randn(slots, hkv, d).to(dtype) for _ in range(layers)]
    vs = [torch.randn(slots, hkv, d).to(dtype) for _ in range(layers)]
    q = torch.randn(batch, hq, d).to(dtype)
    pages = torch.randperm(slots // PAGE - 1)[:batch * pages_each] + 1  # as the engine's
    index = (pages.view(batch, -1, 1) * PAGE + torch.arange(PAGE)).view(batch, -1)
    index = index[:, :length].flatten()
    mask = None if batch == 1 else torch.ones(batch, 1, 1, length, dtype=torch.bool)
    ws = Workspace(hkv, d, dtype, "cpu")  # the engine's reused gather buffers
    n = max(3, 20000 // batch // max(1, length // 64) // layers)
    scale = d ** -0.5

    def sdpa_all() -> None:
        for k, v in zip(ks, vs, strict=True):
            sdpa_decode(q, k, v, index, mask, scale, ws)

    def native_all() -> None:
        for k, v in zip(ks, vs, strict=True):
            native_attention.decode(q, k, v, index, mask, scale)

    sdpa, kernel = _us(sdpa_all, n) / layers, _us(native_all, n) / layers
    name = {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    return f"| {name} | {batch} x {length} | {sdpa:.0f} | {kernel:.0f} | {sdpa / kernel:.2f}x |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (all cores)")
    parser.add_argument("--shape", action="append", help="BATCHxKEYS (repeat)")
    parser.add_argument("--heads", default="9,3,64", help="query heads, KV heads, head dim")
    parser.add_argument("--layers", type=int, default=1,
                        help="layers with caches of their own, read in turn (30: the default "
                             "model's step)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    hq, hkv, d = (int(x) for x in args.heads.split(","))
    q = torch.zeros(1, hq, d)
    if not native_attention.usable(q, q):
        raise SystemExit("the native kernel does not run here (no library, or switched off)")
    print(f"{torch.get_num_threads()} threads, {hq} query / {hkv} KV heads of {d}, "
          f"{args.layers} layer(s); us per layer")
    print("| dtype | batch x keys | gather + SDPA | native | speed-up |")
    print("| :--- | ---: | ---: | ---: | ---: |")
    from minisgl_core.kernels import bf16_fast

    dtypes = [torch.float32] + ([torch.bfloat16] if bf16_fast() else [])
    with torch.inference_mode():
        for dtype in dtypes:
            for shape in args.shape or SHAPES:
                batch, length = (int(x) for x in shape.split("x"))
                print(row(dtype, batch, length, hq, hkv, d, args.layers), flush=True)


if __name__ == "__main__":
    main()
