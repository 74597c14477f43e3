"""``compile`` auto: whether the decode step runs as compiled graphs, and why (the reason goes
to the log, ``/v1/models`` meta and the dashboard)."""

from __future__ import annotations

import os
import shutil
from typing import Any

AUTO_ON = "on by default (compiled where it works; -s compile=false: eager)"


def c_compiler() -> str | None:
    """The C++ compiler inductor builds CPU graphs with (``$CXX``, else g++ or clang++)."""
    for name in (os.environ.get("CXX"), "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def resolve_compile(asked: bool | None, model: Any, device: str,
                    deterministic: bool) -> tuple[bool, str]:
    """``asked``: True or False as given, None for auto -> (compile?, why). Auto compiles
    unless this configuration has no compiled step: a model whose compiled step is not
    batch-invariant under ``deterministic``, or a CPU without a C++ compiler."""
    if asked is not None:
        return asked, "on (asked for)" if asked else "off (asked for)"
    if deterministic and not getattr(model, "compiles_deterministic", False):
        return False, (f"off: {type(model).__name__}'s compiled step is not batch-invariant "
                       "(--deterministic)")
    if device.split(":")[0] == "cpu" and c_compiler() is None:
        return False, "off: no C++ compiler here (g++ or clang++), which CPU graphs need"
    return True, AUTO_ON


__all__ = ["AUTO_ON", "c_compiler", "resolve_compile"]
