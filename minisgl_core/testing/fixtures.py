"""Opt-in pytest fixtures for plugins; use ``pytest_plugins = ["minisgl_core.testing.fixtures"]``.

- ``minisgl_pm``: a fresh plugin manager with the core's default plugins and no entry points;
  register your plugin object or module on it, then ``collect(minisgl_pm)``.
- ``minisgl_plugin_dist``: writes a throwaway installed distribution (a ``dist-info`` with an
  ``entry_points.txt`` in group ``minisgl``) into a temporary directory on ``sys.path``, so entry
  point loading can be tested without touching the environment. The directory also works as
  ``PYTHONPATH`` for a subprocess.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from minisgl_core.plugin.loading import MinisglPluginManager, build_manager


def write_plugin_dist(
    root: Path,
    dist: str,
    entry_points: Mapping[str, str],
    files: Mapping[str, str] = {},  # noqa: B006 - read only
    version: str = "0.1.0",
) -> Path:
    """Write ``files`` (relative path -> source) and a ``<dist>-<version>.dist-info`` declaring
    ``entry_points`` (name -> module) in group ``minisgl`` under ``root``; return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = ["[minisgl]", *(f"{name} = {target}" for name, target in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return root


PluginDistFactory = Callable[..., Path]


@pytest.fixture
def minisgl_pm() -> Iterator[MinisglPluginManager]:
    """A fresh manager: default plugins only, entry points not loaded, not strict."""
    yield build_manager(autoload=False, strict=False)


@pytest.fixture
def minisgl_plugin_dist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PluginDistFactory]:
    """``make(dist, entry_points, files, version="0.1.0") -> dir``: a distribution on sys.path.

    Modules it wrote are forgotten from ``sys.modules`` afterwards, so tests stay independent.
    """
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    written: list[str] = []

    def make(
        dist: str,
        entry_points: Mapping[str, str],
        files: Mapping[str, str] = {},  # noqa: B006 - read only
        version: str = "0.1.0",
    ) -> Path:
        written.extend(Path(rel).with_suffix("").as_posix().replace("/", ".") for rel in files)
        write_plugin_dist(root, dist, entry_points, files, version)
        importlib.invalidate_caches()
        return root

    yield make
    for name in written:
        sys.modules.pop(name.removesuffix(".__init__"), None)
