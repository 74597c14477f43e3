"""Offline engine vs transformers generate (see minisgl_core.bench.engine_vs_hf); same as
``minisgl bench offline``.

    python benchmarks/offline.py [--model DIR] [--batch-size 1 --batch-size 8 ...]
        [--max-tokens 64] [--tp 2]
"""

from __future__ import annotations

import argparse

from minisgl_core.bench.engine_vs_hf import main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: SmolLM2)")
    parser.add_argument("--batch-size", type=int, action="append", dest="batch_sizes")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="one JSON object per batch size")
    parser.add_argument("--profile", action="store_true", help="profile decode steps too")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per system; best is kept")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks on this host")
    args = parser.parse_args()
    main(args.model, args.batch_sizes or [1, 8, 32], args.max_tokens, args.json,
         profile=args.profile, threads=args.threads, repeat=args.repeat, tp=args.tp)
