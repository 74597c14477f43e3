"""The plugin system: hookspecs, the manager and its entry-point loading, registries, listing."""
