"""The one error of the model store: a model spec that names nothing usable."""

from __future__ import annotations


class ModelNotFoundError(Exception):
    """The model spec names nothing usable; the one-line message says what to do."""


__all__ = ["ModelNotFoundError"]
