"""Default plugin: inproc (filled in by its owner)."""
