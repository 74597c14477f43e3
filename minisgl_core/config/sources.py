"""Where launch settings come from, in order of precedence: defaults < a TOML file < the
``MINISGL_<KEY>`` environment < command-line flags < ``-s key=value`` overrides."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from minisgl_core.config import roles as config_roles
from minisgl_core.config.launch import (
    KNOWN_KEYS,
    TABLES,
    ConfigError,
    LaunchConfig,
    unknown_key,
)
from minisgl_core.config.merge import Merged
from minisgl_core.interfaces import ROLE_KINDS

ENV_PREFIX = "MINISGL_"


def read_toml(path: str | Path) -> dict[str, Any]:
    """The config file as a table; ConfigError naming the file when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _parse_value(text: str) -> Any:
    """A -s value for a free-form table: TOML syntax when it parses (1, true, [..]), else text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(merged: Merged, item: str) -> None:
    """Lay one ``-s KEY=VALUE`` (dotted keys reach into the tables) over ``merged``."""
    key, sep, text = item.partition("=")
    key = key.strip()
    source = f"-s {item}"
    if not sep or not key:
        raise ConfigError(f'-s takes KEY=VALUE, got "{item}"')
    head, _, rest = key.partition(".")
    if rest and head == "roles":
        try:
            merged.set_roles(config_roles.from_override(rest, _parse_value(text), source), source)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    elif rest and head in TABLES:
        parts = rest.split(".")
        if len(parts) < 2 or not all(parts):
            raise ConfigError(f'-s {head}.<name>.<key>=VALUE expected, got "{item}"')
        nested: dict[str, Any] = {parts[-1]: _parse_value(text)}
        for part in reversed(parts[:-1]):
            nested = {part: nested}
        merged.set(head, nested, source)
    elif rest:
        raise ConfigError(f'"{head}" is not a table, so "{key}" is not a key ({source})'
                          if head in KNOWN_KEYS else str(unknown_key(head, source)))
    else:
        merged.set(key, text, source)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
) -> LaunchConfig:
    """Merge defaults < ``path`` (TOML) < ``env`` (``MINISGL_<KEY>``, default os.environ) <
    ``flags`` (field name -> value; None = not given) < ``overrides`` ("dotted.key=value")."""
    merged = Merged()
    if path is not None:
        merged.apply_mapping(read_toml(path), f"config file {path}")
    environ = os.environ if env is None else env
    for key in KNOWN_KEYS:
        var = ENV_PREFIX + key.upper()
        if key not in TABLES and key != "roles" and var in environ:
            merged.set(key, environ[var], f"environment {var}")
    for kind in ROLE_KINDS:  # MINISGL_TOKENIZER, ..._DETOKENIZER, ..._SCHEDULER
        var = ENV_PREFIX + kind.upper()
        if var in environ:
            merged.set(kind, environ[var], f"environment {var}")
    for name, value in (flags or {}).items():
        if value is not None:
            merged.set(name, value, f"flag --{name.replace('_', '-')}")
    for item in overrides:
        apply_override(merged, item)
    return merged.build()


__all__ = ["ENV_PREFIX", "load_config", "read_toml"]
