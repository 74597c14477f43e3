"""Transport benchmark: latency and throughput of every registered transport (and baselines).

Same as ``minisgl bench transport``. Example:
``python benchmarks/transports.py --transport zmq --transport nng --size 64 --json``
"""

from __future__ import annotations

import argparse

from minisgl_core.bench.transport import DEFAULT_SIZES, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", action="append", help="only this transport (repeat)")
    parser.add_argument("--size", action="append", type=int,
                        help=f"message size in bytes (repeat; default {list(DEFAULT_SIZES)})")
    parser.add_argument("--json", action="store_true", help="one JSON line per case")
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per case")
    parser.add_argument("--repeat", type=int, default=1, help="runs; report per-case medians")
    args = parser.parse_args()
    main(args.transport, args.size, args.json, args.duration, args.repeat)
