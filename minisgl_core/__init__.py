"""minisgl: a small, fast, plugin-based LLM serving engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

from minisgl_core.sampling import SamplingParams

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("minisgl")

if TYPE_CHECKING:
    from minisgl_core.offline import LLM

__all__ = ["LLM", "SamplingParams", "__version__", "hookimpl"]


def __getattr__(name: str) -> Any:
    # LLM pulls in torch; resolve it only when asked so that `import minisgl_core` stays light.
    if name == "LLM":
        from minisgl_core.offline import LLM

        return LLM
    raise AttributeError(f"module 'minisgl_core' has no attribute {name!r}")
