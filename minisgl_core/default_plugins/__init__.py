"""The core's own plugins, registered like any other plugin (before the entry points)."""

from __future__ import annotations

# Module names, imported in this order by ``plugins.build_manager``; each shows up in
# ``minisgl plugins --all`` as "core.<last part>". Add a module here to make it a core plugin.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "minisgl_core.default_plugins.inproc",
    "minisgl_core.default_plugins.models",
    "minisgl_core.default_plugins.resolve",
    "minisgl_core.default_plugins.roles",
)
