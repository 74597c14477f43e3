"""A cache directory of a test's own that shares the usual cache's native kernels."""

from __future__ import annotations

from pathlib import Path


def own_cache_dir(root: Path) -> Path:
    """Make ``root`` a cache directory for ``MINISGL_CACHE_DIR`` and return it: empty but for
    ``native/``, a link to the current cache's compiled kernels (half a minute to build on 2
    cores, the same bits for every cache). Call it before pointing the environment at ``root``."""
    from minisgl_core.store.paths import cache_dir

    native = cache_dir() / "native"
    native.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    link = root / "native"
    if not link.exists():
        link.symlink_to(native.resolve(), target_is_directory=True)
    return root
