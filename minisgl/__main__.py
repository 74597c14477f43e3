"""``python -m minisgl``: bare flags launch the service, anything else is the ``minisgl`` CLI."""

from __future__ import annotations

from minisgl_core.cli.seed_flags import main

if __name__ == "__main__":
    main()
