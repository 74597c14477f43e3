"""Where models are kept: minisgl's own cache and the shared Hugging Face cache."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$MINISGL_CACHE_DIR``, else ``~/.cache/minisgl`` (converted GGUFs, kernel choices).

    Not ``MINISGL_CACHE``: that is the ``cache`` setting of ``minisgl launch`` (radix, naive).
    """
    env = os.environ.get("MINISGL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "minisgl"


def hf_home() -> Path:
    """``$HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``."""
    env = os.environ.get("HF_HOME")
    if env:
        return Path(os.path.expandvars(env)).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface"


def hf_hub_cache() -> Path:
    """The Hub cache huggingface_hub, transformers and vLLM share, read from the environment
    now (huggingface_hub reads it once, at import): ``$HF_HUB_CACHE``, else ``HF_HOME/hub``."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(os.path.expandvars(env)).expanduser() if env else hf_home() / "hub"


__all__ = ["cache_dir", "hf_home", "hf_hub_cache"]
