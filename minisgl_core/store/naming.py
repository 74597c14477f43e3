"""The name a model directory is served under (``/v1/models``, logs)."""

from __future__ import annotations

import json
from pathlib import Path

MARKER = "minisgl-converted.json"  # written last into a converted directory: never trusted without
DEFAULT_NAME = "SmolLM2-135M-Instruct"


def hub_repo_of(path: Path) -> str | None:
    """``ORG/NAME`` for a snapshot directory of the Hugging Face cache
    (``.../models--ORG--NAME/snapshots/<commit>``), else None."""
    snapshots, repo = path.parent, path.parent.parent
    if snapshots.name != "snapshots" or not repo.name.startswith("models--"):
        return None
    org, _, name = repo.name.removeprefix("models--").partition("--")
    return f"{org}/{name}" if name else org


def model_name_of(path: Path) -> str:
    """The served name: the one a converted directory's marker records, the repo id of a Hub
    snapshot, else the directory's name."""
    path = Path(path)
    marker = path / MARKER
    if marker.is_file():
        try:
            name = json.loads(marker.read_text()).get("name")
        except (OSError, ValueError, AttributeError):
            name = None
        if isinstance(name, str) and name:
            return name
        if path.name.startswith(DEFAULT_NAME):  # converted before markers named the model
            return DEFAULT_NAME
    return hub_repo_of(path) or path.name


__all__ = ["DEFAULT_NAME", "MARKER", "hub_repo_of", "model_name_of"]
