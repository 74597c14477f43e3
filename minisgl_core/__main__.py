"""``python -m minisgl_core`` is the ``minisgl`` command."""

from __future__ import annotations

from minisgl_core.cli.app import main

if __name__ == "__main__":
    main()
