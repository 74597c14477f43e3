"""Matmul kernels side by side on a model's layers, bf16 inputs: each named kernel (weight-only
ones and unquantized bf16 ones alike) over every layer's q/k/v, o, gate/up and down, with
distinct random weights per layer (so each pass reads them from memory, as a decode step does),
at a few row counts. The kernels and row counts are interleaved in every pass, so a busy host
slows all of them alike; the best pass of each counts. ``--head``: the LM head ``[vocab,
hidden]`` alone, in place of the layers.

    python benchmarks/layer_kernels.py [--kernels onednn,int4,int4-gemm] [--rows 1 8 32 64]
                                       [--threads 2] [--repeat 5] [--head]
"""

from __future__ import annotations

import argparse
import time

import torch

from minisgl_core.bench.ceilings import layer_matmuls
from minisgl_core.kernels.matmul.registry import all_kernels
from minisgl_core.plugin.model_lookup import resolve

DEFAULT_KERNELS = ("onednn", "dense", "int8-wo", "int8-wo-gemm", "int8-wo-dequant", "int4",
                   "int4-gemm", "int4-dequant")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Model directory or name (its shapes).")
    parser.add_argument("--kernels", default=",".join(DEFAULT_KERNELS))
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--head", action="store_true",
                        help="The LM head [vocab, hidden] alone, in place of the layers.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    resolved = resolve(args.model)
    config, by_role = layer_matmuls(resolved.path)
    count = config.num_layers
    if args.head:
        by_role, count = {"lm_head": (config.vocab_size, config.hidden_size)}, 1
    kernels = all_kernels()
    gen = torch.Generator().manual_seed(0)
    weights = {role: [torch.randn(*shape, generator=gen) * 0.02 for _ in range(count)]
               for role, shape in by_role.items()}
    packed = {}
    for name in args.kernels.split(","):
        kernel = kernels[name]
        if not kernel.available(torch.device("cpu"), torch.bfloat16):
            print(f"{name}: not available here")
            continue
        # packed from the bf16 weight, as the engine packs every layer from the weight in its
        # dtype (int4 panels with a copy keep that copy in it)
        packed[name] = {role: [kernel.pack(w.bfloat16()) for w in ws]
                        for role, ws in weights.items()}
    inputs = {n: {role: torch.randn(n, shape[1], generator=gen).bfloat16()
                  for role, shape in by_role.items()} for n in args.rows}
    best = {(name, n): dict.fromkeys(by_role, float("inf")) for name in packed for n in args.rows}
    for _ in range(args.repeat):
        for n in args.rows:
            for name, layers in packed.items():
                for role, ws in layers.items():
                    start = time.perf_counter()
                    for w in ws:
                        kernels[name].run(w, inputs[n][role], None, None)
                    seconds = time.perf_counter() - start
                    best[name, n][role] = min(best[name, n][role], seconds)
    print(f"{resolved.path}: {count} layers of {dict(by_role)} (out, in), bf16 inputs, "
          f"{args.threads} threads, best of {args.repeat}; ms for all layers")
    print(f"| rows | kernel | total | {' | '.join(by_role)} |")
    print(f"| ---: | :--- | ---: | {' | '.join('---:' for _ in by_role)} |")
    for n in args.rows:
        for name in packed:
            per = best[name, n]
            cells = " | ".join(f"{per[role] * 1e3:.2f}" for role in by_role)
            print(f"| {n} | {name} | {sum(per.values()) * 1e3:.2f} | {cells} |")


if __name__ == "__main__":
    main()
