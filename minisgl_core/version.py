"""The version of minisgl-core (the one the package metadata in pyproject.toml says)."""

from __future__ import annotations

__version__ = "0.1.0"
