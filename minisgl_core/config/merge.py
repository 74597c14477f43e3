"""How layers of settings merge into a LaunchConfig: each layer's keys are checked and laid over
the ones before, tables deep-merged, and the frontends' shorthands written into the tables of
the frontends the merged config selects."""

from __future__ import annotations

import copy
from collections.abc import Mapping
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
        selected = self.values.get("frontends")
        named = {name for name, _ in self.frontend_writes if name != shorthands.EVERY_FRONTEND}
        # each frontend's table folds, in layer order, its own writes and the "every frontend"
        # ones; with no frontend named yet, those stay under "*" until the default is chosen
        targets = sorted(named | set(selected or ()))
        if selected is None:
            targets.append(shorthands.EVERY_FRONTEND)
        options: dict[str, dict[str, Any]] = {}
        for each in targets:
            every = selected is None or each in selected  # "every frontend" includes this one
            table: dict[str, Any] = {}
            for name, write in self.frontend_writes:
                if name == each or (every and name == shorthands.EVERY_FRONTEND):
                    _deep_merge(table, write)
            table = {k: v for k, v in table.items() if v is not None}  # unset by a shorthand
            if table:
                options[each] = table
        return LaunchConfig(**self.values, **{**self.tables, "frontends_options": options},
                            roles=self.roles)



def from_file_form(data: Mapping[str, Any], source: str = "dict") -> LaunchConfig:
    """A config from its file form (``LaunchConfig.to_dict``), rejecting unknown keys."""
    merged = Merged()
    merged.apply_mapping(data, source)
    return merged.build()


__all__ = ["Merged", "from_file_form"]
