"""Disk tier of the prefix cache: full KV pages saved by a background writer, loaded on RAM misses.

The radix cache (radix_cache.py) calls ``save`` when it takes in freshly computed full pages and
when it evicts a page not saved yet, and ``load_prefix`` for the pages of a prefix it does not
hold. A save copies the pages out of the pool at once (the pool page may be reused next
step) and queues the copy; a writer thread turns it into files (prefix_files.py). The queue is
bounded in bytes: when it is full the pages are not saved (counted as dropped) instead of
stalling the step.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from minisgl_core.engine.prefix_files import (
    HEADER_SIZE,
    PageFiles,
    PageShape,
    chain_key,
    model_fingerprint,
)

if TYPE_CHECKING:
    from minisgl_core.engine.kv_cache import KVPool

log = logging.getLogger(__name__)

MAX_PENDING_BYTES = 256 * 1024 * 1024  # page copies waiting for the writer (then saves drop)
RESCAN_EVERY = 256  # writes between scans of the DIR (other services write to it too)
READ_CHUNK = 32  # pages read (and pool pages taken for them) at a time
CLOSE_WAIT_S = 10.0  # at exit, how long the writer may take to finish its queue


class PageWriter:
    """The writer thread and its queue, bounded in bytes; it holds page copies, never the pool,
    so an engine dropped without ``close`` is still freed (its finalizer stops the thread)."""

    def __init__(self, files: PageFiles) -> None:
        self.files = files
        self.written_bytes = 0
        self.dropped_pages = 0  # not saved: the queue was full
        self._pending_bytes = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[list[bytes], np.ndarray] | None] = queue.Queue()
        self._writes_since_scan = 0
        self._thread = threading.Thread(target=self._run, name="prefix-disk-writer", daemon=True)
        self._thread.start()

    def reserve(self, num_pages: int) -> bool:
        """Room in the queue for ``num_pages`` pages (taken), or False (counted as dropped)."""
        size = num_pages * self.files.shape.payload_bytes
        with self._lock:
            if self._pending_bytes + size > MAX_PENDING_BYTES:
                self.dropped_pages += num_pages
                return False
            self._pending_bytes += size
        return True

    def put(self, keys: list[bytes], data: np.ndarray) -> None:
        """Queue pages ``data`` ``[2, layers, n, page bytes]`` (room reserved)."""
        self._queue.put((keys, data))

    def flush(self) -> None:
        """Wait until every queued page is written (or failed)."""
        self._queue.join()

    def stop(self) -> None:
        """Write what is queued and end the thread (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(CLOSE_WAIT_S)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._write_all(*item)
            finally:
                self._queue.task_done()

    def _write_all(self, keys: list[bytes], data: np.ndarray) -> None:
        try:
            for i, key in enumerate(keys):
                payload = memoryview(np.ascontiguousarray(data[:, :, i])).cast("B")
                self.written_bytes += self.files.write(key, payload)
                self._writes_since_scan += 1
            if (self.files.used_bytes > self.files.budget_bytes
                    or self._writes_since_scan >= RESCAN_EVERY):
                self._writes_since_scan = 0
                self.files.scan_and_evict()
        except OSError as exc:  # a full or read-only disk: the RAM cache goes on without it
            log.warning("prefix cache: writing to %s failed: %s", self.files.root, exc)
        finally:
            with self._lock:
                self._pending_bytes -= len(keys) * self.files.shape.payload_bytes


class DiskTier:
    """One engine's view of a prefix-cache DIR: page keys, loads, saves, tier counters."""

    def __init__(self, files: PageFiles, kv: KVPool) -> None:
        self.files = files
        self.shape = s = files.shape
        # the pool's bytes as pages, [layers, num_pages + 1, page_size * kv_heads * head_dim *
        # itemsize] (int8 rows with their scales: the scales travel with the pages); numpy
        # copies them on this thread alone (a parallel torch op per page costs more than its
        # bytes when other processes hold the cores); the pool is on the CPU
        row = s.page_bytes
        self._k_host = kv.k.view(torch.uint8).numpy().reshape(s.layers, kv.num_pages + 1, row)
        self._v_host = kv.v.view(torch.uint8).numpy().reshape(s.layers, kv.num_pages + 1, row)
        self.root_key = files.fingerprint
        self.hit_tokens = 0  # prompt tokens loaded from disk instead of computed
        self.read_bytes = 0
        self.read_seconds = 0.0  # time spent loading (read, check and copy into the pool)
        self.writer = PageWriter(files)
        # at exit, or when the engine is dropped unclosed: what is queued is written
        self._finalizer = weakref.finalize(self, self.writer.stop)

    @property
    def used_bytes(self) -> int:
        """Bytes of page files in the DIR (all models), as of the last scan plus our writes."""
        return self.files.used_bytes

    @property
    def written_bytes(self) -> int:
        """Bytes this process wrote to the DIR."""
        return self.writer.written_bytes

    @property
    def dropped_pages(self) -> int:
        """Pages not saved because the writer's queue was full."""
        return self.writer.dropped_pages

    def key(self, parent: bytes, tokens: Sequence[int]) -> bytes:
        """The key of the page holding ``tokens`` after the page keyed ``parent``."""
        return chain_key(parent, array("i", tokens).tobytes())

    def save(self, keys: list[bytes], pages: list[int]) -> bool:
        """Queue pool ``pages`` to be written under ``keys``; False (dropped) when the queue is
        full."""
        if not keys:
            return True
        if not self.writer.reserve(len(keys)):
            return False
        # [2, layers, n, page bytes]: a copy, the pool pages may be reused at the next step
        data = np.empty((2, self._k_host.shape[0], len(pages), self._k_host.shape[2]), np.uint8)
        np.take(self._k_host, pages, axis=1, out=data[0])
        np.take(self._v_host, pages, axis=1, out=data[1])
        self.writer.put(keys, data)
        return True

    def load_prefix(self, parent: bytes, pages_tokens: Sequence[Sequence[int]],
                    take: Callable[[int], list[int]]) -> list[int]:
        """Fill pool pages (``take(n)`` hands out n) with the pages holding ``pages_tokens``
        after the page keyed ``parent``, up to the first one not on disk; the pages filled."""
        start = time.perf_counter()
        loaded: list[int] = []
        for run in self.read_runs(self.keys(parent, pages_tokens)):
            pages = take(len(run))
            self.fill(pages, run)
            loaded += pages
        self.read_seconds += time.perf_counter() - start
        return loaded

    def keys(self, parent: bytes, pages_tokens: Sequence[Sequence[int]]) -> list[bytes]:
        """The chained keys of consecutive pages holding ``pages_tokens``, after ``parent``."""
        out = []
        for tokens in pages_tokens:
            parent = self.key(parent, tokens)
            out.append(parent)
        return out

    def read_runs(self, keys: Sequence[bytes]) -> Iterator[list[bytearray]]:
        """The files of ``keys`` in order, READ_CHUNK at a time, up to the first one absent or
        failing its check. The OS is asked to read them all ahead first, so the device works
        while this thread checks and copies."""
        self._read_ahead(keys)
        for c in range(0, len(keys), READ_CHUNK):
            run: list[bytearray] = []
            for key in keys[c:c + READ_CHUNK]:
                buf = self.files.read(key)
                if buf is None:
                    break
                run.append(buf)
            if run:
                self.read_bytes += sum(map(len, run))
                yield run
            if len(run) < len(keys[c:c + READ_CHUNK]):
                return

    def fill(self, pages: list[int], run: list[bytearray]) -> None:
        """Copy page files ``run`` (from ``read_runs``) into pool ``pages``."""
        layers, _, row = self._k_host.shape
        for page, buf in zip(pages, run, strict=True):
            data = np.frombuffer(buf, np.uint8, offset=HEADER_SIZE).reshape(2, layers, row)
            self._k_host[:, page] = data[0]
            self._v_host[:, page] = data[1]
        self.hit_tokens += len(run) * self.shape.page_size

    def _read_ahead(self, keys: Sequence[bytes]) -> None:
        if not hasattr(os, "posix_fadvise"):
            return
        for key in keys:
            try:
                fd = os.open(self.files.path(key), os.O_RDONLY)
            except OSError:
                return  # the first absent page ends the prefix
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)

    def flush(self) -> None:
        """Wait until every queued page is written (or failed)."""
        self.writer.flush()

    def close(self) -> None:
        """Write what is queued and stop the writer (idempotent)."""
        self._finalizer()


def open_disk_tier(directory: str, budget_gb: float, model_dir: Path, kv: KVPool,
                   fingerprint_parts: tuple[object, ...]) -> DiskTier:
    """The disk tier in ``directory`` for the pool ``kv`` of the model in ``model_dir``."""
    layers, _, kv_heads, width = kv.k.shape
    itemsize = kv.k.element_size()
    dtype = str(kv.k.dtype).removeprefix("torch.")
    scale_bytes = (width - kv.head_dim) * itemsize  # an int8 pool's fp16 scale per row
    shape = PageShape(layers, kv.page_size, kv_heads, kv.head_dim, dtype, itemsize, scale_bytes)
    fingerprint = model_fingerprint(model_dir, (*fingerprint_parts, shape))
    files = PageFiles(Path(directory), fingerprint, shape, int(budget_gb * 1024 ** 3))
    log.info("prefix cache disk tier: %s (%.1f GB budget, %.2f GB in use)", directory, budget_gb,
             files.used_bytes / 1024 ** 3)
    return DiskTier(files, kv)


def tier_metrics(ram_hit_tokens: int, prompt_tokens: int, ram_bytes: int,
                 disk: DiskTier | None) -> tuple[tuple[str, float], ...]:
    """/metrics series by tier: hits and misses (prompt tokens), bytes held, disk traffic.

    ``ram_hit_tokens`` is every cache hit (pages loaded from disk are in the RAM tree then);
    the RAM tier's own hits are those the disk did not supply.
    """
    disk_hits = disk.hit_tokens if disk is not None else 0
    ram_hits = max(ram_hit_tokens - disk_hits, 0)
    out: list[tuple[str, float]] = [
        ("prefix_cache_ram_hit_tokens_total", ram_hits),
        ("prefix_cache_ram_miss_tokens_total", max(prompt_tokens - ram_hits, 0)),
        ("prefix_cache_ram_bytes", ram_bytes)]
    if disk is not None:
        out += [("prefix_cache_disk_hit_tokens_total", disk_hits),
                ("prefix_cache_disk_miss_tokens_total", max(prompt_tokens - ram_hit_tokens, 0)),
                ("prefix_cache_disk_bytes", disk.used_bytes),
                ("prefix_cache_disk_read_bytes_total", disk.read_bytes),
                ("prefix_cache_disk_read_seconds_total", disk.read_seconds),
                ("prefix_cache_disk_written_bytes_total", disk.written_bytes),
                ("prefix_cache_disk_dropped_pages_total", disk.dropped_pages)]
    return tuple((name, float(value)) for name, value in out)
