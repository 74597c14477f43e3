"""Default plugin: models (filled in by its owner)."""
