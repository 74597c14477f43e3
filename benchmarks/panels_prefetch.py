"""How far ahead the native kernels prefetch their weights (``PREFETCH_BYTES``,
csrc/portable/wo_shared.h), side by side in one run: the library built once per distance, each
run in turn over every int4 panel matmul of a model's layers (Q4_0 layout, random bytes, in huge
pages as the engine keeps them), with the host's read rate measured before each round.

    python benchmarks/panels_prefetch.py [--bytes 2048 6144] [--rows 1 8] [--rounds 6]
                                         [--shape 2048 4096 ...] [--layers 28] [--threads 2]

The default shapes are Qwen3-1.7B's (hidden 2048, q/k/v 4096, gate/up 2 x 6144, 28 layers).
``MINISGL_CPU_FEATURES=avx2`` runs the kernels' AVX2 code instead.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from pathlib import Path

import torch

from minisgl_core.engine import huge_pages
from minisgl_core.kernels.native import library as native

# (inputs, outputs) of each matmul of a Qwen3-1.7B layer: q/k/v, o, gate/up, down
QWEN3_1_7B = (2048, 4096, 2048, 2048, 2048, 12288, 6144, 2048)


def build(distance: int, where: Path) -> ctypes.CDLL:
    """The library as ``make setup`` builds it, with the prefetch distance ``distance``."""
    cc = native.compiler()
    if cc is None:
        raise SystemExit("no C compiler on PATH")
    out = where / f"minisgl-prefetch-{distance}.so"
    native.run_compiler([cc, *native.FLAGS, f"-DPREFETCH_BYTES={distance}",
                         *map(str, native.SOURCES), *native.LIBS, "-o", str(out)])
    lib = ctypes.CDLL(str(out), mode=ctypes.RTLD_LOCAL)
    for name, (ret, args) in native.prototypes().items():
        getattr(lib, name).restype, getattr(lib, name).argtypes = ret, args
    return lib


def weights(shapes: list[tuple[int, int]],
            layers: int) -> tuple[torch.Tensor, list[tuple[int, int, int, int]]]:
    """One buffer holding them all, and (inputs, outputs, nibbles' address, scales' address) per
    matmul."""
    sizes = [(i * o // 2, i * o // 32 * 2) for i, o in shapes]
    total = layers * sum(q + s for q, s in sizes)
    place = huge_pages.buffer(total)
    if place is None:
        place = torch.empty(total, dtype=torch.uint8)
    place.random_(0, 256)
    scales = place.view(torch.uint16)  # every scale 2^-7 (fp16 0x2000): finite sums
    out, at = [], 0
    for _ in range(layers):
        for (i, o), (q, s) in zip(shapes, sizes, strict=True):
            scales[(at + q) // 2:(at + q + s) // 2] = 0x2000
            out.append((i, o, place.data_ptr() + at, place.data_ptr() + at + q))
            at += q + s
    return place, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, nargs="+", default=[2048, 6144])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--shape", type=int, nargs="+", default=list(QWEN3_1_7B),
                    help="inputs and outputs of each matmul of a layer, in pairs")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shapes = list(zip(args.shape[0::2], args.shape[1::2], strict=True))
    _place, mats = weights(shapes, args.layers)
    nbytes = sum(i * o // 2 + i * o // 16 for i, o, _, _ in mats)
    big = huge_pages.empty((64 << 20,), torch.float32, "cpu").fill_(1.0)
    with tempfile.TemporaryDirectory() as tmp:
        libs = {d: build(d, Path(tmp)) for d in args.bytes}
        print(f"{len(mats)} int4 matmuls, {nbytes / 1e6:.1f} MB, {args.threads} threads")
        for rows in args.rows:
            x = torch.randn(rows, max(i for i, _ in shapes))
            y = torch.empty(rows, max(o for _, o in shapes))
            took: dict[int, list[float]] = {d: [] for d in libs}
            reads = []
            for r in range(args.rounds):
                start = time.perf_counter()
                big.sum()
                reads.append(big.numel() * 4 / (time.perf_counter() - start) / 1e9)
                # each distance first in turn: the first pass after the read above is slower
                order = list(libs.items())
                for d, lib in order[r % len(order):] + order[:r % len(order)]:
                    start = time.perf_counter()
                    for i, o, q, s in mats:
                        lib.wo_int4_panels(x.data_ptr(), 0, rows, i, q, s, None, o, y.data_ptr(),
                                           0, None, args.threads)
                    took[d].append(time.perf_counter() - start)
            line = " | ".join(f"{d} B: {statistics.median(t) * 1e3:.2f} ms "
                              f"{nbytes / statistics.median(t) / 1e9:.1f} GB/s"
                              for d, t in took.items())
            print(f"rows {rows}: read {min(reads):.1f}-{max(reads):.1f} GB/s | {line} "
                  f"(median of {args.rounds})")


if __name__ == "__main__":
    main()
