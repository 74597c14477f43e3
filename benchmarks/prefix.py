"""Prefix cache on a shared-system-prompt chat workload, radix vs naive (see
minisgl_core.bench.prefix_cache).

    python benchmarks/prefix.py [--model DIR] [--requests 32] [--system-tokens 500] \
        [--max-tokens 8] [--arrival sequential --arrival burst] [--threads N] [--json]
"""

from __future__ import annotations

import argparse

from minisgl_core.bench.prefix_cache import ARRIVALS, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: SmolLM2)")
    parser.add_argument("--requests", type=int, default=32, help="distinct user turns")
    parser.add_argument("--system-tokens", type=int, default=500, help="shared prompt length")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens generated per request")
    parser.add_argument("--arrival", action="append", choices=ARRIVALS, dest="arrivals")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    args = parser.parse_args()
    raise SystemExit(main(args.model, args.requests, args.system_tokens, args.max_tokens,
                          args.arrivals or ARRIVALS, args.threads, args.json))
