"""The launch configuration: frozen dataclasses, defaults < TOML < env < flags < -s key=value."""
