"""The launch configuration: frozen dataclasses, defaults < TOML < env < flags < -s key=value."""

from __future__ import annotations

from minisgl_core import deprecated

# minisgl_core.config was one module before it became this package: its names still resolve
__getattr__ = deprecated.forwarder(__name__)
