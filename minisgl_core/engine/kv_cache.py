"""Paged KV cache: per-layer K/V slot pools and a page allocator with a free list."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from minisgl_core.engine import huge_pages
from minisgl_core.engine.config import DEFAULT_KV_CACHE_BYTES
from minisgl_core.kernels import kv_int8

if TYPE_CHECKING:
    from minisgl_core.engine.config import EngineConfig, ModelConfig


class OutOfPages(RuntimeError):
    """The allocator has fewer free pages than asked for."""


class PageAllocator:
    """Hands out page ids 1..num_pages (page 0 is the zeroed scratch page used for padding).

    The free list is a stack, so recently freed (cache-warm, already resident) pages go first.
    """

    def __init__(self, num_pages: int) -> None:
        self.num_pages = num_pages
        self._free: list[int] = list(range(num_pages, 0, -1))
        self._is_free = bytearray(b"\x01") * (num_pages + 1)
        self._is_free[0] = 0

    @property
    def num_free(self) -> int:
        """How many pages can be allocated now."""
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        """Take ``n`` pages; OutOfPages (and nothing taken) when fewer are free."""
        if n > len(self._free):
            raise OutOfPages(f"asked for {n} pages, {len(self._free)} free")
        if n == 0:
            return []
        pages = self._free[-n:]
        del self._free[-n:]
        for p in pages:
            self._is_free[p] = 0
        return pages

    def free(self, pages: list[int]) -> None:
        """Return pages; a page freed twice is a bug and raises before anything changes."""
        for p in pages:
            if self._is_free[p] or p == 0:
                raise RuntimeError(f"page {p} freed twice (or never allocated)")
        for p in pages:
            self._is_free[p] = 1
        self._free.extend(pages)


class KVPool:
    """K and V for every layer: ``[num_slots, n_kv_heads, head_dim]`` each, slot = page * P + i.

    ``kv_dtype`` "auto" stores them in the model's ``dtype``; "int8" as packed int8 rows
    ``[num_slots, n_kv_heads, head_dim + 2]`` (int8 values, then their fp16 scale:
    kernels/kv_int8.py), quantized as they are stored; the attention kernels read either.
    Allocated untouched, in huge pages on the CPU (huge_pages.py: attention reads them in a
    fraction of the TLB entries), so untouched pages cost no resident memory; page 0 is zeroed
    because padded attention gathers read it (its keys are masked, but 0 * NaN would not be 0).
    ``prefault`` zeroes every page up front: with a prefix cache the pool fills up over time
    anyway, and paying for it at start keeps the process's memory flat instead of creeping up.
    """

    def __init__(self, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str,
                 prefault: bool = False, kv_dtype: str = "auto") -> None:
        self.page_size = page_size
        self.num_pages = num_pages
        self.head_dim = head_dim
        self.kv_dtype = kv_dtype
        self.quantized = kv_dtype == "int8"
        if self.quantized and head_dim % 2:
            raise ValueError(f"kv_cache_dtype int8 needs an even head_dim, got {head_dim}")
        slots = (num_pages + 1) * page_size
        width = kv_int8.row_bytes(head_dim) if self.quantized else head_dim
        storage = torch.int8 if self.quantized else dtype
        shape = (num_layers, slots, num_kv_heads, width)
        self.k = huge_pages.empty(shape, storage, device)
        self.v = huge_pages.empty(shape, storage, device)
        touched = slots if prefault else page_size
        self.k[:, :touched].zero_()  # int8 zeros: values 0, scale 0.0
        self.v[:, :touched].zero_()
        self.k_layers = list(self.k.unbind(0))  # per-layer views [num_slots, Hkv, D (+ 2)]
        self.v_layers = list(self.v.unbind(0))

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int,
                        dtype: torch.dtype, kv_dtype: str = "auto") -> int:
        """Memory one cached token takes across all layers (K and V)."""
        per_head = (kv_int8.row_bytes(head_dim) if kv_dtype == "int8"
                    else head_dim * torch.finfo(dtype).bits // 8)
        return 2 * num_layers * num_kv_heads * per_head

    def store(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write new keys/values ``[T, Hkv, D]`` at ``slots [T]`` (quantized in an int8 pool)."""
        if self.quantized:
            k, v = kv_int8.quantize(k), kv_int8.quantize(v)
        self.k_layers[layer].index_copy_(0, slots, k)
        self.v_layers[layer].index_copy_(0, slots, v)


def default_num_pages(config: EngineConfig, cfg: ModelConfig, num_kv_heads: int,
                      max_seq_len: int) -> int:
    """KV pages for DEFAULT_KV_CACHE_BYTES of ``num_kv_heads`` heads, capped at what
    max_running_requests full-context requests can use."""
    dtype: torch.dtype = getattr(torch, config.dtype)
    per_token = KVPool.bytes_per_token(cfg.num_layers, num_kv_heads, cfg.head_dim, dtype,
                                       config.kv_cache_dtype)
    pages = DEFAULT_KV_CACHE_BYTES // per_token // config.page_size
    one_request = -(-max_seq_len // config.page_size)
    useful = one_request * config.max_running_requests
    return int(max(one_request, min(pages, useful)))
