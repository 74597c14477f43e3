"""Transport benchmark: latency and throughput of every registered transport (and baselines).

Same as ``minisgl bench transport``. Examples:
``python benchmarks/transports.py --transport zmq --transport nng --size 64 --json``;
``python benchmarks/transports.py --endpoints tcp --auth --repeat 3`` (ipc, tcp, tcp + keys)
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
    parser.add_argument("--endpoints", choices=("ipc", "tcp"), default="ipc",
                        help="tcp: loopback tcp as well, beside ipc")
    parser.add_argument("--auth", action="store_true",
                        help="with tcp, also with keys (zmq CURVE, nng TLS); implies tcp")
    args = parser.parse_args()
    main(args.transport, args.size, args.json, args.duration, args.repeat,
         "tcp" if args.auth else args.endpoints, args.auth)
