"""Matmul weights and KV pages in transparent huge pages: one TLB entry for 2 MiB, not 4 KiB.

A decode step reads every weight once; through 4 KiB pages that is a TLB miss a page, and in a
virtual machine each miss walks two page tables. On a 2-core AMD EPYC Zen 4 VM, summing 1 GiB
ran at 27-45 GB/s from 4 KiB pages and at 63-67 GB/s (five runs of six) from huge pages
(docs/design/kernels.md, section 28). Linux backs anonymous memory with huge pages where it is
asked to (``transparent_hugepage`` "madvise", a common default) or always; torch's CPU allocator
does not ask. So the engine copies the matmul weights into one private anonymous mapping, 2 MiB
aligned and advised ``MADV_HUGEPAGE``, and points the very tensor objects there
(``Tensor.set_``): every holder, the C++ operators' registry included, reads the new place. The
KV pool is allocated the same way. Where the host gives no huge pages (``never``, not Linux)
nothing moves; ``MINISGL_HUGE_PAGES=0`` keeps torch's allocations (to measure against, or where
compacting memory into huge pages at load costs more than it gives).
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from minisgl_core.kernels import model_linears

HUGE_PAGE = 2 << 20
OPT_OUT = "MINISGL_HUGE_PAGES"
_ALIGN = 64  # each storage's start in the buffer: a cache line (and any element size)
_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) ")


@functools.cache
def _host_gives_them() -> bool:
    """Whether the kernel can give this process transparent huge pages (not "[never]")."""
    try:
        return "[never]" not in Path(_SETTING).read_text()
    except OSError:  # no such setting (not Linux, or THP compiled out)
        return False


def buffer(nbytes: int) -> torch.Tensor | None:
    """``[nbytes]`` uint8 of zeroed CPU memory, 2 MiB aligned and advised for huge pages (memory
    is taken as it is first written); None where the host gives none (nothing to gain)."""
    if (nbytes <= 0 or not hasattr(mmap, "MADV_HUGEPAGE") or os.environ.get(OPT_OUT) == "0"
            or not _host_gives_them()):
        return None
    size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    # private: a shared anonymous mapping is shmem, which the anonymous THP setting skips;
    # one huge page more, so that an aligned start fits (not touched: costs no memory)
    mapping = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = torch.frombuffer(mapping, dtype=torch.uint8)  # keeps the mapping alive
    start = -whole.data_ptr() % HUGE_PAGE
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE, start, size)
    except OSError:  # refused after all: plain pages, the same memory otherwise
        pass
    return whole[start:start + nbytes]


def empty(shape: Sequence[int], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``torch.empty(shape, dtype=dtype, device=device)``, in huge pages on the CPU (zeroed)."""
    nbytes = math.prod(shape) * dtype.itemsize
    place = buffer(nbytes) if torch.device(device).type == "cpu" else None
    if place is None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    return place.view(dtype).view(tuple(shape))


def move(tensors: Iterable[torch.Tensor]) -> torch.Tensor | None:
    """Copy the storages of ``tensors`` (those on the CPU, strided) into one huge-page buffer
    and point each tensor at its copy, views of one storage staying views of one; the buffer
    (None: nothing moved). A storage of no bytes stays as it is: a kernel may read its NULL."""
    users: dict[int, list[torch.Tensor]] = {}  # storage address -> its tensors
    storages: dict[int, torch.UntypedStorage] = {}
    seen: set[int] = set()
    for t in tensors:
        if id(t) in seen or t.device.type != "cpu" or t.layout != torch.strided:
            continue
        seen.add(id(t))
        storage = t.untyped_storage()
        if storage.nbytes() == 0:
            continue
        users.setdefault(storage.data_ptr(), []).append(t)
        storages[storage.data_ptr()] = storage
    spans = {p: -(-s.nbytes() // _ALIGN) * _ALIGN for p, s in storages.items()}
    place = buffer(sum(spans.values()))
    if place is None:
        return None
    target, base, at = place.untyped_storage(), place.storage_offset(), 0
    with torch.inference_mode():  # weights made under it are inference tensors
        for p, storage in storages.items():
            place[at:at + storage.nbytes()].copy_(torch.empty(0, dtype=torch.uint8).set_(storage))
            for t in users[p]:  # base + at: a multiple of every element size
                t.set_(target, (base + at) // t.element_size() + t.storage_offset(), t.size(),
                       t.stride())
            at += spans[p]
    return place


def move_weights(model: object) -> torch.Tensor | None:
    """``move`` the matmul weights of ``model`` (every Linear's; a tied LM head's dense weight is
    the embedding table's very tensor, which moves with it) into huge pages; their buffer."""
    return move([t for lin in model_linears(model) for t in lin.tensors()])


def huge_bytes(place: torch.Tensor) -> int:
    """Bytes of ``place`` the kernel holds in huge pages now (``/proc/self/smaps``, its mapping's
    huge pages, at most ``place``'s bytes; 0 where it cannot tell)."""
    address = place.data_ptr()
    try:
        with open("/proc/self/smaps") as smaps:
            inside = False
            for line in smaps:
                span = _MAPPING.match(line)
                if span:
                    inside = int(span[1], 16) <= address < int(span[2], 16)
                elif inside and line.startswith("AnonHugePages:"):
                    return min(int(line.split()[1]) * 1024, place.nbytes)
    except OSError:
        pass
    return 0
