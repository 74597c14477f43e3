"""minisgl_kernels.h is the one list of the native entry points: the C sources define exactly what
it declares, ctypes binds what it declares, and its constants are Python's."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from minisgl_core.kernels.matmul import base, weight_only
from minisgl_core.kernels.native import library

HEADER = library.CSRC / "minisgl_kernels.h"


def defined_in_sources() -> dict[str, int]:
    """name -> parameter count of every non-static function the C sources define."""
    found: dict[str, int] = {}
    for src in library.SOURCES:
        text = re.sub(r"/\*.*?\*/", "", src.read_text(), flags=re.S)
        for name, args in re.findall(r"^(?:int|void)\s+(\w+)\(([^)]*)\)\s*\{", text, flags=re.M):
            params = [a for a in args.split(",") if a.strip() and a.strip() != "void"]
            count = len(params) + (12 if "ARGS" in args else 0)  # ARGS: pa_decode's 13
            found[name] = count
    return found


def test_the_sources_define_what_the_header_declares() -> None:
    declared = {name: len(args) for name, (_, args) in library.prototypes().items()}
    assert len(declared) >= 11
    assert defined_in_sources() == declared


def test_ctypes_binds_every_declared_function() -> None:
    lib = library.library()
    if lib is None:
        pytest.skip(f"no native library here: {library.failure()}")
    for name, (restype, argtypes) in library.prototypes().items():
        fn = getattr(lib, name)
        assert (fn.restype, fn.argtypes) == (restype, argtypes), name


def test_the_header_constants_are_pythons() -> None:
    text = HEADER.read_text()
    tops = re.search(r"#define MINISGL_BUCKET_TOP \{([^}]*)\}", text)
    buckets = re.search(r"#define MINISGL_BUCKETS (\d+)", text)
    tile = re.search(r"#define MINISGL_TILE_ELEMS \(1 << (\d+)\)", text)
    assert tops and buckets and tile
    assert tuple(int(t) for t in tops.group(1).split(",")) == base._BUCKET_TOP
    assert int(buckets.group(1)) == len(base.BUCKETS) == len(base._BUCKET_TOP) + 1
    assert 1 << int(tile.group(1)) == weight_only.TILE_ELEMS


def test_the_library_exports_only_the_declared_functions() -> None:
    """What the ISA files share (their rows, helpers) stays inside the library: static or hidden."""
    nm = shutil.which("nm")
    if nm is None or library.library() is None:
        pytest.skip(f"no nm or no native library here: {library.failure()}")
    cc = library.compiler()
    assert cc is not None
    listing = subprocess.run([nm, "-D", "--defined-only", str(library.target(cc))],
                             capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in listing.splitlines() if line.split()[1:2] == ["T"]}
    assert exported == set(library.prototypes())
