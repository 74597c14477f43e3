"""The config written out, as ``minisgl config show`` prints it: TOML (read back by ``-c`` to an
equal config) or JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from minisgl_core.config.launch import TABLES, LaunchConfig


def to_json(config: LaunchConfig) -> str:
    """The config as indented JSON (``minisgl config show --json``)."""
    return json.dumps(config.to_dict(), indent=2)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key)
    return key if bare else json.dumps(key)


def _toml_table(prefix: str, table: Mapping[str, Any], out: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    subtables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if scalars or not subtables:
        out.append(f"\n[{prefix}]")
        out.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items())
    for key, sub in subtables.items():
        _toml_table(f"{prefix}.{_toml_key(key)}", sub, out)


def to_toml(config: LaunchConfig) -> str:
    """The config as a TOML file that ``-c`` reads back to an equal config (None = commented)."""
    out: list[str] = []
    data = config.to_dict()
    for key, value in data.items():
        if key in TABLES or key == "roles":
            continue
        out.append(f"# {key} = (unset)" if value is None else f"{key} = {_toml_value(value)}")
    _toml_table("roles", data["roles"], out)
    for key in TABLES:
        for name, table in data[key].items():
            _toml_table(f"{key}.{_toml_key(name)}", table, out)
    return "\n".join(out) + "\n"
