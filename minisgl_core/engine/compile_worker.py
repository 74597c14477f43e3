"""``python -m minisgl_core.engine.compile_worker``: the child process compile_child.py starts. It
builds the serving engine's configuration eagerly, compiles its decode graphs into inductor's
cache and writes the configuration's marker."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from minisgl_core.parent_death import follow_starter


def main() -> int:
    """Read the job (JSON on stdin), compile at nice 19; 0 once the marker is written."""
    follow_starter()
    os.nice(19)
    job = json.loads(sys.stdin.buffer.read())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s compile-child %(levelname)s %(message)s")
    import torch

    from minisgl_core.engine.compiled import CompiledDecode, write_marker
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.import_path import load_target

    torch.set_num_threads(job["threads"])
    # the graphs' shapes are the engine's: the same pool and weights; no prefaulted pages, no
    # disk tier, no compiled step of its own
    config = EngineConfig(**{**job["config"], "compile": False, "cache": "naive",
                             "prefix_cache_dir": None})
    engine = Engine(config, load_target(job["model_class"]))
    compiled = CompiledDecode(engine.model, engine.kv, engine.workspace, engine.device,
                              config.deterministic)
    compiled.compile_now()
    if not compiled.ready:
        return 1
    write_marker(Path(job["marker"]), compiled.compile_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
