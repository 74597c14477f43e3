"""Batching policy: a waiting queue, a running batch, chunked prefill and preemption by recompute.

Each step every running request that is fully prefilled decodes one token, and whatever is left
of the prefill token budget goes first to partly prefilled requests, then to new ones (FIFO).
Pages are taken as tokens need them. When a decoding request needs a page and none is free, the
newest running request is preempted: its pages are freed and it goes back to the front of the
queue, to be recomputed from its prompt and the tokens it already produced.

With the radix prefix cache, an admitted request starts from the longest cached prefix of its
tokens, full pages are shared through the tree as soon as they are computed, a request that ends
or is preempted leaves its full pages there, and allocation evicts unused cached pages when the
free list runs short (so "available" below means free or evictable).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from minisgl_core.engine.kv_cache import PageAllocator
from minisgl_core.engine.prompt_logprobs import needs_positions
from minisgl_core.engine.radix_cache import RadixCache
from minisgl_core.engine.request import Request, State


@dataclass
class ScheduledBatch:
    """One step's work: decode rows first, then (request, new tokens) prefill chunks."""

    decode: list[Request] = field(default_factory=list)
    prefill: list[tuple[Request, int]] = field(default_factory=list)


class Batcher:
    """The engine's batching policy: owns the waiting queue and the running list, and every page
    a request holds; ``schedule()`` picks each step's batch. (The scheduler *role*, what a
    service's scheduler process runs, is ``interfaces.Scheduler``: the Engine is one.)"""

    def __init__(self, allocator: PageAllocator, page_size: int, max_running: int,
                 max_prefill_tokens: int, cache: str = "naive") -> None:
        self.allocator = allocator
        self.cache = RadixCache(allocator, page_size) if cache == "radix" else None
        self.page_size = page_size
        self.max_running = max_running
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is preempted first
        self.num_preemptions = 0
        self.prompt_tokens = 0  # prompt tokens of admitted requests (each counted once)

    def add(self, req: Request) -> None:
        """Queue a new request."""
        req.state = State.WAITING
        self.waiting.append(req)

    def remove(self, req: Request) -> None:
        """Take a request out (finished or aborted) and free its pages, exactly once."""
        if req.state is State.RUNNING:
            self.running.remove(req)
        elif req.state is State.WAITING:
            self.waiting.remove(req)
        self._release(req)
        req.state = State.FINISHED

    def _release(self, req: Request) -> None:
        if self.cache is not None:
            self.cache.release(req)
        pages, req.pages = req.pages, []
        self.allocator.free(pages)
        req.num_cached = 0

    def check_pages_returned(self, num_pages: int) -> None:
        """Raise AssertionError unless free + cached pages == ``num_pages`` (call when idle)."""
        cached = self.cache.num_pages if self.cache else 0
        if self.allocator.num_free + cached != num_pages:
            raise AssertionError(f"{num_pages - self.allocator.num_free - cached} pages leaked")
        if self.cache and (self.cache.num_evictable != cached or len(self.cache.pages()) != cached):
            raise AssertionError("the prefix cache's counts are off (a lock was not dropped)")

    @property
    def num_available(self) -> int:
        """Pages that can be allocated now: free, or cached and used by no running request."""
        return self.allocator.num_free + (self.cache.num_evictable if self.cache else 0)

    def _alloc(self, n: int) -> list[int]:
        short = n - self.allocator.num_free
        if short > 0 and self.cache is not None:
            self.cache.evict(short)
        return self.allocator.alloc(n)

    def _pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self._release(req)
        req.state = State.WAITING
        self.waiting.appendleft(req)
        self.num_preemptions += 1

    def _grow(self, req: Request, num_tokens: int) -> None:
        """Give ``req`` pages for ``num_tokens`` cached tokens (caller checked they are free)."""
        need = self._pages_for(num_tokens) - len(req.pages)
        if need > 0:
            req.pages.extend(self._alloc(need))

    def grow_if_free(self, req: Request, num_tokens: int) -> bool:
        """Give ``req`` pages for ``num_tokens`` tokens if that needs no preemption."""
        if self._pages_for(num_tokens) - len(req.pages) > self.num_available:
            return False
        self._grow(req, num_tokens)
        return True

    def trim(self, req: Request, num_tokens: int) -> None:
        """Free the pages of ``req`` past those ``num_tokens`` tokens need (rejected drafts)."""
        keep = max(self._pages_for(num_tokens), req.num_shared_pages)
        if len(req.pages) > keep:
            self.allocator.free(req.pages[keep:])
            del req.pages[keep:]

    def schedule(self) -> ScheduledBatch | None:
        """Pick this step's work and allocate its pages; None when there is nothing to do."""
        batch = ScheduledBatch()
        if self.cache is not None:
            for req in self.running:  # share what the last step completed
                self.cache.update(req)
        for req in [r for r in self.running if r.num_tokens - r.num_cached == 1]:
            if req.state is not State.RUNNING:
                continue  # preempted for an older request in this loop
            need = self._pages_for(req.num_cached + 1) - len(req.pages)
            while need > self.num_available and req.state is State.RUNNING:
                self._preempt(self.running[-1])
            if req.state is State.RUNNING:
                self._grow(req, req.num_cached + 1)
                batch.decode.append(req)
        budget = self.max_prefill_tokens
        for req in self.running:
            remaining = req.num_tokens - req.num_cached
            if remaining <= 1 or budget <= 0:
                continue
            room = (len(req.pages) + self.num_available) * self.page_size - req.num_cached
            n = min(remaining, budget, room)
            if n > 0:
                self._grow(req, req.num_cached + n)
                batch.prefill.append((req, n))
                budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            req = self.waiting[0]
            # a request still collecting prompt logprobs must compute every prompt position
            bypass = needs_positions(req.prompt_lp, len(req.prompt_ids))
            hit = self.cache.admit(req) if self.cache is not None and not bypass else 0
            n = min(req.num_tokens - hit, budget)
            # keep one page per running request so admissions do not force instant preemptions
            reserve = len(self.running)
            if self._pages_for(hit + n) - len(req.pages) + reserve > self.num_available:
                self._release(req)  # drop the prefix lock; it is matched again next time
                break
            self.waiting.popleft()
            req.state = State.RUNNING
            self.running.append(req)
            if not req.admitted:
                req.admitted, req.cached_tokens = True, hit
                self.prompt_tokens += len(req.prompt_ids)
            if self.cache is not None:
                self.cache.hit_tokens += hit
            self._grow(req, hit + n)
            batch.prefill.append((req, n))
            budget -= n
        if not batch.decode and not batch.prefill:
            if not self.running:
                return None
            # only partly prefilled requests, and no page for any of them: make room
            self._preempt(self.running[-1])
            return self.schedule()
        return batch
