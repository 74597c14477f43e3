"""A plugin for the service tests, loaded through MINISGL_PLUGINS: each process appends
``<hook> <process> <pid> <tag>`` to $MINISGL_PROBE_FILE (tag: its ``[plugins.probe_plugin]``)."""

from __future__ import annotations

import os
from typing import Any

from minisgl_core import hookimpl


def _note(hook: str, process: str, config: Any) -> None:
    tag = config.plugin_table("probe_plugin").get("tag", "-")
    with open(os.environ["MINISGL_PROBE_FILE"], "a") as f:  # one short write per line: atomic
        f.write(f"{hook} {process} {os.getpid()} {tag}\n")


@hookimpl
def minisgl_configure(config: Any, process: str) -> None:
    _note("configure", process, config)


@hookimpl
def minisgl_unconfigure(config: Any, process: str) -> None:
    _note("unconfigure", process, config)
