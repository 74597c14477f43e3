"""How layers of settings merge into a LaunchConfig: each layer's keys are checked and laid over
the ones before, tables deep-merged, and the frontends' shorthands written into the tables of
the frontends the merged config selects."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from minisgl_core.config import roles as config_roles
from minisgl_core.config import shorthands
from minisgl_core.config.launch import (
    SCALARS,
    TABLES,
    ConfigError,
    LaunchConfig,
    coerce,
    unknown_key,
)
from minisgl_core.interfaces import ROLE_KINDS


def _deep_merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)


class Merged:
    """The layers applied so far: core fields and tables, later layers winning."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.tables: dict[str, dict[str, Any]] = {name: {} for name in TABLES.values()}
        self.roles: config_roles.RoleTables = {}
        # [frontends.*] tables and shorthands in layer order: "every frontend" needs the final list
        self.frontend_writes: list[tuple[str, Mapping[str, Any]]] = []

    def set_roles(self, value: Any, source: str) -> None:
        """Lay a ``roles`` value (any source's form) over the roles so far."""
        try:
            config_roles.merge(self.roles, config_roles.normalize(value, source))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def set(self, key: str, value: Any, source: str, text: bool = True) -> None:
        """Set one top-level key; ``text``: the value is a string to parse (env, flags, -s)."""
        if key == "roles":
            self.set_roles(value, source)
        elif text and key in ROLE_KINDS:  # --scheduler NAME, MINISGL_SCHEDULER
            self.set_roles({key: value}, source)
        elif key == "frontend" or (key == "frontends" and not isinstance(value, Mapping)):
            self.values["frontends"] = coerce("frontends", value, source, text)
        elif key in TABLES:
            if not isinstance(value, Mapping) or not all(
                isinstance(v, Mapping) for v in value.values()
            ):
                raise ConfigError(f"{key} must be a table of tables ([{key}.<name>]) ({source})")
            if key == "frontends":
                self.frontend_writes += list(value.items())
            else:
                _deep_merge(self.tables[TABLES[key]], value)
        elif key in shorthands.SHORTHANDS:
            try:
                self.frontend_writes.append(shorthands.frontend_write(key, value, source, text))
            except shorthands.ShorthandError as exc:
                raise ConfigError(str(exc)) from None
        elif key in SCALARS:
            self.values[key] = coerce(key, value, source, text)
        else:
            raise unknown_key(key, source)

    def apply_mapping(self, data: Mapping[str, Any], source: str) -> None:
        """Lay a file-form table over the layers so far (values keep their TOML types)."""
        for key, value in data.items():
            self.set(key, value, source, text=False)

    def build(self) -> LaunchConfig:
        """The config of every layer applied (checked by LaunchConfig itself)."""
        selected = self.values.get("frontends", _DEFAULT_FRONTENDS)
        tables = {**self.tables, "frontends_options": {}}
        for name, table in self.frontend_writes:
            for each in selected if name == shorthands.EVERY_FRONTEND else (name,):
                _deep_merge(tables["frontends_options"].setdefault(each, {}), table)
        for name, table in list(tables["frontends_options"].items()):  # unset by a shorthand
            for key in [k for k, v in table.items() if v is None]:
                del table[key]
            if not table:
                del tables["frontends_options"][name]
        return LaunchConfig(**self.values, **tables, roles=self.roles)


_DEFAULT_FRONTENDS = next(f.default for f in fields(LaunchConfig) if f.name == "frontends")


__all__ = ["Merged"]
