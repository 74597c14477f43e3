"""A plugin's options table checked against what the plugin declares: its keys, their defaults
(and so their types), and a port's range. Each frontend declares its own (host, port, api_key,
...); ``minisgl launch`` checks them before any worker starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minisgl_core.did_you_mean import suggest

_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a table"}


def _fits(value: Any, default: Any) -> bool:
    if default is None:  # an optional string (an API key, a path)
        return value is None or isinstance(value, str)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, int | float)
    return isinstance(value, type(default))


def checked_options(where: str, table: Mapping[str, Any],
                    declared: Mapping[str, Any]) -> dict[str, Any]:
    """``declared`` (option -> default) with ``table`` laid over it; ValueError naming ``where``
    (e.g. ``[frontends.openai]``) for an unknown option, with the closest known one, or a value
    of another type than its default's (an integer passes for a float, a string for None)."""
    for key, value in table.items():
        if key not in declared:
            raise ValueError(f"unknown option {key!r} in {where};{suggest(key, list(declared))} "
                             f"known: {', '.join(declared)}")
        default = declared[key]
        if not _fits(value, default):
            want = "a string" if default is None else _TYPE_NAMES.get(type(default), "valid")
            raise ValueError(f"{where} {key} must be {want}, got {value!r}")
    merged = {**declared, **table}
    return {k: float(v) if isinstance(declared[k], float) else v for k, v in merged.items()}


def check_port(where: str, port: int) -> int:
    """``port`` when it is in 0..65535 (0: any free port), else ValueError naming ``where``."""
    if not 0 <= port <= 65535:
        raise ValueError(f"{where} port must be in 0..65535, got {port}")
    return port
