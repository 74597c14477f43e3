"""``python -m minisgl_core.kernels.native``: build the C library and its torch operators ahead
(``make setup``); a failure is reported, not fatal: the Python paths work without them."""

from __future__ import annotations

import sys

from minisgl_core.kernels.native import library, ops


def main() -> int:
    """Build both, printing where each is or why it is not."""
    for what, make in (("native kernels", library.build), ("native torch operators", ops.build)):
        try:
            print(f"{what}: {make()}")
        except RuntimeError as exc:
            print(f"{what} not built (the Python paths will be used): {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
