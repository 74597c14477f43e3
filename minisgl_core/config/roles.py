"""The ``[roles]`` part of the launch config: which tokenizer, detokenizer and scheduler run,
and each one's own ``[roles.<kind>.<name>]`` options table.

In a file, a kind is either a name (``[roles] scheduler = "synthetic"``) or a table with a
``name`` key and option tables per implementation::

    [roles.scheduler]
    name = "synthetic"

    [roles.scheduler.synthetic]        # handed to the synthetic scheduler only
    tokens_per_s = 50

Kept here, beside ``launch.py``, so the config module stays about the core keys.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from minisgl_core.did_you_mean import suggest
from minisgl_core.interfaces import ROLE_KINDS, RoleKind

# the implementation each kind runs when the config names none (keys: every RoleKind)
DEFAULT_ROLES: dict[RoleKind, str] = {"tokenizer": "hf", "detokenizer": "hf",
                                     "scheduler": "continuous"}

RoleTables = dict[str, dict[str, Any]]
"""kind -> {"name": selected name, <implementation name>: its options table, ...}."""


def _kind(kind: object, source: str) -> str:
    if kind not in ROLE_KINDS:
        raise ValueError(f'unknown role kind "{kind}" in roles ({source});'
                         f"{suggest(str(kind), list(ROLE_KINDS))} kinds: {', '.join(ROLE_KINDS)}")
    return str(kind)


def _name(value: object, kind: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"roles.{kind} must name a {kind}, got {value!r} ({source})")
    return value.strip()


def normalize(value: object, source: str) -> RoleTables:
    """Check a ``roles`` value from any source and bring it to the one internal form."""
    if not isinstance(value, Mapping):
        raise ValueError(f"roles must be a table ([roles]), got {value!r} ({source})")
    out: RoleTables = {}
    for kind, entry in value.items():
        kind = _kind(kind, source)
        if not isinstance(entry, Mapping):
            out[kind] = {"name": _name(entry, kind, source)}
            continue
        table: dict[str, Any] = {}
        for key, item in entry.items():
            if key == "name":
                table["name"] = _name(item, kind, source)
            elif isinstance(item, Mapping):
                table[str(key)] = copy.deepcopy(dict(item))
            else:
                raise ValueError(f"roles.{kind}.{key} must be the options table of the {kind} "
                                 f'"{key}" ([roles.{kind}.{key}]), got {item!r} ({source})')
        out[kind] = table
    return out


def merge(into: RoleTables, new: RoleTables) -> None:
    """Lay ``new`` over ``into``: names replace, options tables merge key by key."""
    for kind, table in new.items():
        current = into.setdefault(kind, {})
        for key, item in table.items():
            if key != "name" and isinstance(current.get(key), dict):
                current[key].update(item)
            else:
                current[key] = copy.deepcopy(item)


def with_defaults(roles: Mapping[str, Mapping[str, Any]]) -> RoleTables:
    """Every kind present, its name defaulted (what a LaunchConfig holds)."""
    out = {kind: copy.deepcopy(dict(roles.get(kind, {}))) for kind in ROLE_KINDS}
    for kind, table in out.items():
        table.setdefault("name", DEFAULT_ROLES[kind])
    return out


def from_override(path: str, value: Any, source: str) -> RoleTables:
    """``-s roles.<kind>=NAME``, ``-s roles.<kind>.name=NAME`` or
    ``-s roles.<kind>.<name>.<key>=VALUE`` as a roles value."""
    parts = path.split(".")
    if not all(parts) or len(parts) == 0:
        raise ValueError(f'-s roles.<kind>=NAME or roles.<kind>.<name>.<key>=VALUE expected '
                         f"({source})")
    kind = _kind(parts[0], source)
    if len(parts) == 1 or parts[1:] == ["name"]:
        return {kind: {"name": _name(str(value), kind, source)}}
    if len(parts) < 3:
        raise ValueError(f"-s roles.{kind}.<name>.<key>=VALUE expected ({source})")
    nested: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[2:-1]):
        nested = {part: nested}
    return {kind: {parts[1]: nested}}


def to_file_form(roles: RoleTables) -> dict[str, Any]:
    """A kind without options as its bare name, so that ``[roles]`` reads as a list of choices."""
    return {kind: table["name"] if set(table) == {"name"} else copy.deepcopy(table)
            for kind, table in roles.items()}
