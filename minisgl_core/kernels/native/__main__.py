"""``python -m minisgl_core.kernels.native``: build the C library, its torch operators and the
spin-wait probe ahead (``make setup``); a failure is reported, not fatal: the Python paths (and
a fixed spin count) work without them."""

from __future__ import annotations

import sys

from minisgl_core.kernels.native import library, ops, pause


def main() -> int:
    """Build each, printing where it is or why it is not."""
    for what, make in (("native kernels", library.build), ("native torch operators", ops.build),
                       ("spin-wait probe", pause.build)):
        try:
            print(f"{what}: {make()}")
        except RuntimeError as exc:
            print(f"{what} not built (the project runs without it, slower): {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
