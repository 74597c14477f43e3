"""The `minisgl` command line: the typer app and what its commands share."""
