"""Top-level keys that write a frontend's own options: ``port`` is the openai frontend's
``[frontends.openai] port``; ``host`` and ``api_key`` are every selected frontend's.

The options themselves, their defaults and their checks belong to each frontend; these keys (and
``--port``, ``--host``, ``--api-key``, ``MINISGL_PORT`` ...) only write them, at the layer they
come from, so a later layer wins as for any key. Kept beside ``launch.py``, which merges them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from minisgl_core import deprecated

EVERY_FRONTEND = "*"  # a write for each frontend the merged config selects

# key -> (the frontend whose table it writes, the value's type)
SHORTHANDS: dict[str, tuple[str, type]] = {
    "port": ("openai", int),
    "host": (EVERY_FRONTEND, str),
    "api_key": (EVERY_FRONTEND, str),
}

# what the deprecated LaunchConfig.host / .port / .api_key (gone in 0.3) answer when the openai
# frontend's table does not set them: the defaults they had as core keys
DEPRECATED_DEFAULTS: dict[str, Any] = {"host": "127.0.0.1", "port": 8000, "api_key": None}


class ShorthandError(ValueError):
    """A shorthand value of the wrong type; the message names the key and where it came from."""


def frontend_write(key: str, value: Any, source: str, text: bool) -> tuple[str, dict[str, Any]]:
    """(frontend name or EVERY_FRONTEND, {option: value}) for one shorthand; ``text``: the value
    is a string to parse (env, flags, -s), else it must have the option's type (TOML)."""
    target, kind = SHORTHANDS[key]
    if value is None or (kind is str and value == ""):
        return target, {key: None}  # "-s api_key=" unsets it (the merge drops it)
    if kind is int and isinstance(value, str) and text:
        try:
            value = int(value.strip())
        except ValueError:
            raise ShorthandError(f'{key} must be an integer, got "{value}" ({source})') from None
    if not isinstance(value, kind) or isinstance(value, bool):
        want = "an integer" if kind is int else "a string"
        raise ShorthandError(f"{key} must be {want}, got {value!r} ({source})")
    return target, {key: value}


def deprecated_key(openai_options: Mapping[str, Any], name: str) -> Any:
    """What ``LaunchConfig.<name>`` answers for a key that left the core (with a warning)."""
    warnings.warn(f"LaunchConfig.{name} is deprecated and goes away in minisgl "
                  f"{deprecated.REMOVED_IN}: a frontend reads its own options table "
                  f'(config.frontend_table("openai")["{name}"])', DeprecationWarning,
                  stacklevel=3)
    return openai_options.get(name, DEPRECATED_DEFAULTS[name])
