"""Page files of the prefix cache's disk tier: format, atomic writes, checked reads, LRU by size.

One file per full KV page, ``DIR/<fingerprint>/<key[:2]>/<key>.kvp``: a fixed 128-byte header
(magic, version, model fingerprint, page key, shape, dtype, payload length, CRC-32 of the payload)
then the payload, K then V, ``[2, layers, page_size, kv_heads, head_dim]`` (an int8 pool's
rows each followed by their fp16 scale). A file is written to
a temporary name in its own folder and renamed into place, so a reader (of this or any other
process) sees a whole page or none. A file whose header or checksum does not match is deleted and
reported once, never served. Each read touches the file's mtime: eviction deletes the oldest
mtimes first until the whole DIR is under its byte budget.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"MSGLKVP\x00"
VERSION = 1
HEADER_SIZE = 128
DIGEST_SIZE = 16  # blake2b bytes of fingerprints and page keys
# magic, version, fingerprint, key, layers, page size, kv heads, head dim, dtype, payload, crc32
_HEADER = struct.Struct(f"<8sI{DIGEST_SIZE}s{DIGEST_SIZE}s4I16sQI")
SUFFIX = ".kvp"
STALE_TMP_S = 3600.0  # a temporary file this old was left by a writer that died


@dataclass(frozen=True)
class PageShape:
    """What one page file holds: K and V, each ``[layers, page_size, kv_heads, head_dim]``
    (an int8 pool's rows carry their scale too: ``scale_bytes`` after each head's values)."""

    layers: int
    page_size: int
    kv_heads: int
    head_dim: int
    dtype: str  # torch dtype name, e.g. "float32"
    itemsize: int
    scale_bytes: int = 0  # per (token, head) row: 2 in an int8 pool (its fp16 scale), else 0

    @property
    def page_bytes(self) -> int:
        """Bytes of one page of one layer's K (or V)."""
        return self.page_size * self.kv_heads * (self.head_dim * self.itemsize
                                                 + self.scale_bytes)

    @property
    def payload_bytes(self) -> int:
        """Bytes of K and V of one page."""
        return 2 * self.layers * self.page_bytes


def chain_key(parent: bytes, tokens: bytes) -> bytes:
    """Page i's key: hash of page i-1's key and page i's token ids (int32 little-endian)."""
    return hashlib.blake2b(parent + tokens, digest_size=DIGEST_SIZE).digest()


class PageFiles:
    """The page files of one model in ``root``, shared with any other process using ``root``."""

    def __init__(self, root: Path, fingerprint: bytes, shape: PageShape, budget_bytes: int) -> None:
        self.root = root
        self.fingerprint = fingerprint
        self.shape = shape
        self.budget_bytes = budget_bytes
        self.folder = root / fingerprint.hex()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.used_bytes = 0  # the whole root's page files at the last scan, plus our writes since
        self.rejected = 0  # files deleted because they failed a check
        self.scan_and_evict()

    def path(self, key: bytes) -> Path:
        """Where the page with ``key`` lives."""
        name = key.hex()
        return self.folder / name[:2] / f"{name}{SUFFIX}"

    def has(self, key: bytes) -> bool:
        """Whether a file for ``key`` exists now (it may still fail its check on read)."""
        return self.path(key).is_file()

    def header(self, key: bytes, payload: bytes | memoryview) -> bytes:
        """The 128-byte header of ``key``'s file with this payload."""
        s = self.shape
        head = _HEADER.pack(MAGIC, VERSION, self.fingerprint, key, s.layers, s.page_size,
                            s.kv_heads, s.head_dim, s.dtype.encode(), len(payload),
                            zlib.crc32(payload))
        return head.ljust(HEADER_SIZE, b"\x00")

    def write(self, key: bytes, payload: bytes | memoryview) -> int:
        """Store one page atomically; bytes written (0 when a file is already there)."""
        final = self.path(key)
        if final.exists():
            return 0
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(self.header(key, payload))
            f.write(payload)
        os.replace(tmp, final)  # atomic: readers see the old state or the whole new file
        written = HEADER_SIZE + len(payload)
        self.used_bytes += written
        return written

    def read(self, key: bytes) -> bytearray | None:
        """The payload of ``key``'s page, or None when absent or failing a check (then deleted)."""
        path = self.path(key)
        want = self.shape.payload_bytes
        try:
            with open(path, "rb") as f:
                buf = bytearray(HEADER_SIZE + want)
                got = f.readinto(buf)
                extra = f.read(1)
        except FileNotFoundError:
            return None
        problem = self._problem(buf, got, extra, key)
        if problem is not None:
            self._reject(path, problem)
            return None
        try:  # most recently used now (LRU); the file may have been evicted meanwhile
            os.utime(path)
        except OSError:
            pass
        return buf

    def _problem(self, buf: bytearray, got: int, extra: bytes, key: bytes) -> str | None:
        if got < HEADER_SIZE:
            return "truncated header"
        (magic, version, fingerprint, file_key, layers, page_size, heads, head_dim, dtype,
         length, crc) = _HEADER.unpack_from(buf)
        s = self.shape
        if magic != MAGIC or version != VERSION:
            return "not a page file of this version"
        if fingerprint != self.fingerprint:
            return "written for another model or KV layout"
        if file_key != key:
            return "holds another page"
        if ((layers, page_size, heads, head_dim) != (s.layers, s.page_size, s.kv_heads, s.head_dim)
                or dtype.rstrip(b"\x00").decode(errors="replace") != s.dtype
                or length != s.payload_bytes):
            return "page shape or dtype differs"
        if got != HEADER_SIZE + length or extra:
            return f"truncated or overlong ({got - HEADER_SIZE} of {length} payload bytes)"
        if zlib.crc32(memoryview(buf)[HEADER_SIZE:]) != crc:
            return "checksum mismatch"
        return None

    def _reject(self, path: Path, problem: str) -> None:
        log.warning("prefix cache: skipped and deleted %s: %s", path, problem)
        self.rejected += 1
        try:
            path.unlink()
        except OSError:
            pass

    def scan_and_evict(self) -> int:
        """Measure every page file under root; delete the least recently used ones until the
        total is within the budget. Returns the bytes deleted."""
        files: list[tuple[float, int, str]] = []
        now = time.time()
        for dirpath, _, names in os.walk(self.root):
            for name in names:
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue  # evicted by another process meanwhile
                if name.endswith(".tmp") and now - st.st_mtime > STALE_TMP_S:
                    _unlink(full)
                elif name.endswith(SUFFIX):
                    files.append((st.st_mtime, st.st_size, full))
        total = sum(size for _, size, _ in files)
        deleted = 0
        if total > self.budget_bytes:
            files.sort()
            for _, size, full in files:
                if total - deleted <= self.budget_bytes:
                    break
                if _unlink(full):
                    deleted += size
        self.used_bytes = total - deleted
        return deleted


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def model_fingerprint(model_dir: Path, parts: tuple[object, ...]) -> bytes:
    """Identity of a model's KV: config.json, every weight file's name, size and first and last
    64 KiB (safetensors headers name and place every tensor), and ``parts`` (dtype, KV layout,
    quantization: anything else that changes the keys and values)."""
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    h.update(repr(parts).encode())
    config = model_dir / "config.json"
    if config.is_file():
        h.update(config.read_bytes())
    weights = sorted(p for p in model_dir.iterdir()
                     if p.suffix in (".safetensors", ".bin", ".gguf", ".pt") and p.is_file())
    for p in weights:
        size = p.stat().st_size
        h.update(f"{p.name}:{size}".encode())
        with open(p, "rb") as f:
            h.update(f.read(65536))
            f.seek(max(0, size - 65536))
            h.update(f.read(65536))
    return h.digest()
