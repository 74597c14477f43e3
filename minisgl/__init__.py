"""``python -m minisgl``: the ``minisgl`` command under the name mini-sglang's users type."""

from __future__ import annotations
