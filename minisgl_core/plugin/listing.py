"""What ``minisgl plugins`` shows: one row per plugin (broken ones included), as text or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from minisgl_core.plugin.loading import CORE_DIST, MinisglPluginManager
from minisgl_core.plugin.registry import Registries
from minisgl_core.version import __version__


@dataclass(frozen=True)
class PluginRow:
    """One line of ``minisgl plugins``."""

    name: str
    dist: str
    version: str
    provides: tuple[str, ...]
    hooks: tuple[str, ...]
    status: str  # "ok" or "broken: <error>"


def describe(pm: MinisglPluginManager, regs: Registries, *, all: bool = False) -> list[PluginRow]:
    """Rows for every plugin, broken ones included; the default plugins fold into one "core" row
    unless ``all`` is true."""
    provides = regs.provides()
    problems: dict[str, str] = {}
    for error, owners in regs.conflicts():
        for owner in owners:
            problems.setdefault(owner, f"conflict: {error}")
    rows: list[PluginRow] = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue  # blocked name
        origin = pm.origin(name)
        hooks = sorted(c.name for c in pm.get_hookcallers(plugin) or [])
        status = problems.get(name, "ok")
        rows.append(PluginRow(name, origin.dist, origin.version, tuple(provides.get(name, [])),
                              tuple(hooks), status))
    for name, broken in pm.broken.items():
        o = broken.origin
        rows.append(PluginRow(name, o.dist, o.version, (), (), f"broken: {broken.error}"))
    if not all:
        core = [r for r in rows if r.name.startswith("core.") and r.dist == CORE_DIST]
        if core:
            bad = [f"{r.name}: {r.status}" for r in core if r.status != "ok"]
            merged = PluginRow(
                "core", CORE_DIST, __version__,
                tuple(p for r in core for p in r.provides),
                tuple(sorted({h for r in core for h in r.hooks})),
                "; ".join(bad) if bad else "ok",
            )
            rows = [merged, *[r for r in rows if r not in core]]
    return rows


def as_table(rows: Sequence[PluginRow]) -> str:
    """The rows as the aligned text table ``minisgl plugins`` prints."""
    cells = [("name", "dist", "version", "provides", "status")]
    cells += [(r.name, r.dist, r.version, " ".join(r.provides) or "-", r.status) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    return "\n".join(
        "  ".join(c[i].ljust(widths[i]) for i in range(4)) + "  " + c[4] for c in cells
    )


def roles_table(regs: Registries) -> str:
    """The role implementations by kind, as ``minisgl plugins`` prints them under the table."""
    from minisgl_core.config.roles import DEFAULT_ROLES

    cells = [("role", "name", "plugin")]
    for kind in regs.roles.kinds():
        for entry in regs.roles[kind]:
            default = " (default)" if entry.name == DEFAULT_ROLES.get(kind) else ""
            cells.append((kind, entry.name + default, entry.owner))
    widths = [max(len(c[i]) for c in cells) for i in range(2)]
    return "\n".join(f"{c[0].ljust(widths[0])}  {c[1].ljust(widths[1])}  {c[2]}" for c in cells)


def as_dicts(rows: Sequence[PluginRow]) -> list[dict[str, Any]]:
    """The rows as JSON-able objects (every field, hooks included)."""
    keys = ("name", "dist", "version", "provides", "hooks", "status")
    return [{k: list(v) if isinstance(v := getattr(r, k), tuple) else v for k in keys}
            for r in rows]


def as_json(rows: Sequence[PluginRow]) -> str:
    """The rows as a JSON list of objects (every field, hooks included)."""
    return json.dumps(as_dicts(rows), indent=2)
