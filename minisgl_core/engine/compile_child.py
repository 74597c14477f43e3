"""Starting the process that compiles a configuration's decode graphs into inductor's cache
(compile_worker.py), at the lowest CPU priority, so that the serving process shares neither its
GIL nor a fair share of the cores with the compiler (compiled.py loads the graphs once it is
done)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from minisgl_core.import_path import load_target
from minisgl_core.parent_death import child_env


def class_name(cls: Any) -> str | None:
    """``module:qualname`` of ``cls``, when another process can import it by that name
    (``load_target``)."""
    name = f"{cls.__module__}:{cls.__qualname__}"
    try:
        return name if load_target(name) is cls else None
    except (ImportError, AttributeError):
        return None


def spawn(config: Any, model_class: Any, marker: Path,
          threads: int) -> subprocess.Popen[bytes] | None:
    """Start compiling ``config``'s graphs (an EngineConfig with every "auto" resolved) in a
    child process that writes ``marker`` once they are in the cache; None where the model class
    cannot be imported by name in another process (the caller compiles on a thread then)."""
    name = "__main__" not in model_class.__module__ and class_name(model_class)
    if not name:
        return None
    payload = json.dumps({"config": dataclasses.asdict(config), "model_class": name,
                          "marker": str(marker), "threads": threads}).encode()
    proc = subprocess.Popen([sys.executable, "-m", "minisgl_core.engine.compile_worker"],
                            stdin=subprocess.PIPE, env=child_env())
    assert proc.stdin is not None
    proc.stdin.write(payload)
    proc.stdin.close()
    return proc


__all__ = ["class_name", "spawn"]
