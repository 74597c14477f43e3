"""minisgl: a small, fast, plugin-based LLM serving engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minisgl_core import deprecated
from minisgl_core.plugin.hookspecs import hookimpl
from minisgl_core.sampling import SamplingParams
from minisgl_core.version import __version__

if TYPE_CHECKING:
    from minisgl_core.offline import LLM

__all__ = ["LLM", "SamplingParams", "__version__", "hookimpl"]

deprecated.install()  # the module paths of earlier releases keep importing, with a warning


def __getattr__(name: str) -> Any:
    # LLM pulls in torch; resolve it only when asked so that `import minisgl_core` stays light.
    if name == "LLM":
        from minisgl_core.offline import LLM

        return LLM
    raise AttributeError(f"module 'minisgl_core' has no attribute {name!r}")
