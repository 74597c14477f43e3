"""Default plugin: resolve (filled in by its owner)."""
