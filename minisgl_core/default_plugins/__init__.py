"""The core's own plugins, registered like any other plugin (before the entry points).

The plugin system loads them by module name (``plugin.loading.DEFAULT_PLUGINS``), as it loads
entry points, so that it imports nothing of what they implement.
"""

from __future__ import annotations

from minisgl_core import deprecated

__getattr__ = deprecated.forwarder(__name__)  # DEFAULT_PLUGINS moved to plugin.loading
