"""Peak resident memory of loading a checkpoint into a model, one tensor at a time (Linux).

``python -m minisgl_core.testing.peak_load DIR DTYPE`` loads DIR's safetensors into its Llama /
Qwen model in DTYPE and prints one JSON line: the peak growth of the resident set during the
load (``VmHWM``, reset just before it), the growth after it, and the load report. Run in a fresh
process so that nothing else allocates meanwhile.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(model_dir: Path, dtype: str) -> dict[str, object]:
    """Build the model (kernels forced: no measuring), reset the high-water mark, load."""
    os.environ.setdefault("MINISGL_LINEAR", "dense-hf")
    import torch

    from minisgl_core.engine.config import ModelConfig
    from minisgl_core.engine.weights import apply_kernels, load_weights
    from minisgl_core.plugin.model_lookup import resolve

    resolved = resolve(str(model_dir))
    cfg = ModelConfig.from_dir(Path(resolved.path))
    model = resolved.model_class(cfg, dtype=getattr(torch, dtype), device="cpu",
                                 max_seq_len=min(cfg.max_position_embeddings, 256))
    apply_kernels(model, getattr(torch, dtype))  # timed on buffers of its own: not the load's
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    base = _status_kib("VmRSS")
    report = load_weights(model, Path(resolved.path), getattr(torch, dtype))
    return {"peak_mib": (_status_kib("VmHWM") - base) / 1024,
            "after_mib": (_status_kib("VmRSS") - base) / 1024,
            "read_mib": report.bytes_read / 2**20, "stored": list(report.stored),
            "seconds": report.seconds}


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1]), sys.argv[2])))
