"""Generate the Python stubs for generate.proto and load them; `python -m` this to regenerate.

Only the .proto is committed. The stubs (``generate_pb2.py``, ``generate_pb2_grpc.py``,
``generate_pb2.pyi``) are made by the installed ``grpcio-tools`` into ``_generated/`` next to this
file, or into a user cache directory when the package directory is read-only. A ``STAMP`` file
holds a hash of the .proto and of the tools' versions, so a changed .proto or an upgraded
grpcio-tools regenerates them (~250 ms) on the next import, and stubs are never newer than the
installed runtime (grpcio-tools requires grpcio and protobuf at least as new as its gencode).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import sys
import tempfile
import types
from importlib import metadata
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROTO_ROOT = PACKAGE_DIR / "proto"
PROTO_FILE = "minisgl/v1/generate.proto"  # relative to PROTO_ROOT; also its name in descriptors
DEFAULT_OUT = PACKAGE_DIR / "_generated"
GENERATED_PACKAGE = f"{__package__}._generated"
STAMP = "STAMP"
_PB2 = "generate_pb2"
_OUTPUTS = (f"{_PB2}.py", f"{_PB2}.pyi", f"{_PB2}_grpc.py")


def fingerprint() -> str:
    """A hash of the .proto text and the code generator's and runtime's versions."""
    h = hashlib.sha256((PROTO_ROOT / PROTO_FILE).read_bytes())
    for dist in ("grpcio-tools", "protobuf"):
        try:
            h.update(f"\0{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"\0{dist}=?".encode())
    return h.hexdigest()


def is_fresh(out_dir: Path) -> bool:
    """True when ``out_dir`` holds every stub, made from the current .proto and tools."""
    try:
        stamp = (out_dir / STAMP).read_text().strip()
    except OSError:
        return False
    return stamp == fingerprint() and all((out_dir / name).is_file() for name in _OUTPUTS)


def generate(out_dir: Path = DEFAULT_OUT) -> Path:
    """Run protoc into ``out_dir`` (created if needed); return it. Raises OSError if unwritable."""
    from grpc_tools import protoc  # the code generator: imported only when generating

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".protoc-") as tmp:
        args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={tmp}",
                f"--grpc_python_out={tmp}", f"--pyi_out={tmp}", str(PROTO_ROOT / PROTO_FILE)]
        if protoc.main(args) != 0:
            raise RuntimeError(f"grpc_tools.protoc failed on {PROTO_ROOT / PROTO_FILE}")
        made = Path(tmp) / Path(PROTO_FILE).parent
        grpc_file = made / f"{_PB2}_grpc.py"
        # protoc writes an absolute import ("from minisgl.v1 import generate_pb2"); the stubs live
        # in this plugin's own package, so make it relative. The descriptor keeps its proto path.
        absolute = f"from {Path(PROTO_FILE).parent.as_posix().replace('/', '.')} import {_PB2}"
        text = grpc_file.read_text()
        if absolute not in text:
            raise RuntimeError(f"unexpected protoc output: {absolute!r} not in {grpc_file.name}")
        grpc_file.write_text(text.replace(absolute, f"from . import {_PB2}"))
        # each file lands atomically; the stamp goes last, so a half-written set is never fresh
        for name in _OUTPUTS:
            os.replace(made / name, out_dir / name)
        (out_dir / STAMP).write_text(fingerprint() + "\n")
    return out_dir


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "minisgl" / "grpc-stubs" / fingerprint()[:16]


def ensure_stubs() -> Path:
    """Return a directory holding fresh stubs, generating them when missing or stale."""
    for out_dir in (DEFAULT_OUT, _cache_dir()):
        if is_fresh(out_dir):
            return out_dir
        try:
            return generate(out_dir)
        except OSError:  # read-only install: fall through to the user cache
            continue
    raise RuntimeError(f"cannot write the gRPC stubs to {DEFAULT_OUT} or {_cache_dir()}")


def load_stubs() -> tuple[types.ModuleType, types.ModuleType]:
    """Import (generating first if needed) and return ``(generate_pb2, generate_pb2_grpc)``."""
    if GENERATED_PACKAGE not in sys.modules:
        package = types.ModuleType(GENERATED_PACKAGE, "Generated gRPC stubs for generate.proto.")
        package.__path__ = [str(ensure_stubs())]
        sys.modules[GENERATED_PACKAGE] = package
    pb2 = importlib.import_module(f"{GENERATED_PACKAGE}.{_PB2}")
    pb2_grpc = importlib.import_module(f"{GENERATED_PACKAGE}.{_PB2}_grpc")
    return pb2, pb2_grpc


def main(argv: list[str] | None = None) -> int:
    """``python -m minisgl_frontend_grpc.codegen [--check] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m minisgl_frontend_grpc.codegen",
                                     description="Generate the gRPC stubs for generate.proto.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--check", action="store_true",
                        help="only check: exit 1 when the stubs are missing or stale")
    args = parser.parse_args(argv)
    if args.check:
        fresh = is_fresh(args.out)
        print(f"{args.out}: {'fresh' if fresh else 'missing or stale'}")
        return 0 if fresh else 1
    print(f"wrote {', '.join(_OUTPUTS)} to {generate(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
