"""The matmuls as C++ torch operators against the same kernels behind the Python path, side by
side in one run: two engines of one model, one with every Linear on ``minisgl::native_linear``,
one with every Linear on its Python path (``Linear.run_eager``; a custom op in compiled graphs);
each eager and with its decode step compiled. Decode attention is the same operator in both.

    python benchmarks/native_ops.py [--quantization int4] [--dtype float32] [--batch 1 8]
"""

from __future__ import annotations

import argparse

import torch

from minisgl_core.bench.engine_vs_hf import PROMPTS, run_engine
from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.plugin.model_lookup import resolve


def engines(quantization: str | None, dtype: str, threads: int) -> dict[str, Engine]:
    """native / python, each eager and compiled (graphs ready before anything is timed)."""
    resolved = resolve(None)
    out = {}
    for path in ("native", "python"):
        for compiled in (False, True):
            engine = Engine(EngineConfig(model=resolved.path, num_threads=threads,
                                         cache="naive", quantization=quantization, dtype=dtype,
                                         compile=compiled), resolved.model_class)
            if path == "python":  # before the graphs trace: they then hold the Python op
                linears = [engine.model.lm_head] + [getattr(layer, n) for layer in
                                                    engine.model.layers
                                                    for n in ("qkv", "o", "gate_up", "down")]
                for lin in linears:
                    lin.native = False
            if engine.compiled is not None:
                assert engine.compiled.wait(), engine.compiled.status()
            out[f"{path}{'+compiled' if compiled else ''}"] = engine
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quantization", default=None)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = engines(args.quantization, args.dtype, args.threads)
    tok = next(iter(runs.values())).tokenizer
    print(f"{args.quantization or args.dtype}, {args.threads} threads, {args.tokens} tokens a "
          f"request, best of {args.repeat}, tok/s:")
    print("| batch | " + " | ".join(runs) + " |")
    print("|---:|" + "---:|" * len(runs))
    for batch in args.batch:
        prompts = [tok.encode(PROMPTS[i % len(PROMPTS)]) for i in range(batch)]
        best = dict.fromkeys(runs, 0.0)
        for _ in range(args.repeat):  # interleaved: the host's load falls on all alike
            for name, engine in runs.items():
                seconds, produced = run_engine(engine, prompts, args.tokens)
                best[name] = max(best[name], produced / seconds)
        print(f"| {batch} | " + " | ".join(f"{v:.1f}" for v in best.values()) + " |")


if __name__ == "__main__":
    main()
