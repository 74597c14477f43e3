"""The process that compiles a configuration's decode graphs into inductor's cache, at the lowest
CPU priority, so that the serving process shares neither its GIL nor a fair share of the cores
with the compiler (engine/compiled.py loads the graphs once it is done)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any


def _die_with_parent() -> None:
    """In the child before exec: Linux kills it when the process that started it dies."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL


def spawn(config: Any, model_class: Any, marker: Path,
          threads: int) -> subprocess.Popen[bytes] | None:
    """Start compiling ``config``'s graphs (an EngineConfig with every "auto" resolved) in a
    child process that writes ``marker`` when they are in the cache; None where ``model_class``
    cannot be named to another process (then the caller compiles on a thread)."""
    try:
        payload = pickle.dumps((config, model_class, str(marker), threads))
    except (pickle.PicklingError, AttributeError, TypeError):
        return None
    linux = sys.platform.startswith("linux")
    proc = subprocess.Popen([sys.executable, "-m", "minisgl_core.engine.compile_child"],
                            stdin=subprocess.PIPE, preexec_fn=_die_with_parent if linux else None)
    assert proc.stdin is not None
    proc.stdin.write(payload)
    proc.stdin.close()
    return proc


def main() -> int:
    """The child: build the engine eagerly, compile its decode graphs, write the marker."""
    os.nice(19)
    config, model_class, marker, threads = pickle.load(sys.stdin.buffer)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s compile-child %(levelname)s %(message)s")
    import torch

    from minisgl_core.engine.compiled import CompiledDecode, write_marker
    from minisgl_core.engine.engine import Engine

    torch.set_num_threads(threads)
    # the graphs' shapes are the engine's: the same pool and weights, no prefaulted pages, no
    # disk tier
    engine = Engine(dataclasses.replace(config, compile=False, cache="naive",
                                        prefix_cache_dir=None), model_class)
    compiled = CompiledDecode(engine.model, engine.kv, engine.workspace, engine.device,
                              config.deterministic)
    compiled.compile_now()
    if not compiled.ready:
        return 1
    write_marker(Path(marker), compiled.compile_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
