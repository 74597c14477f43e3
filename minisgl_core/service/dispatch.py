"""Data-parallel dispatch, in the tokenizer process: each tokenized request goes to one scheduler
replica (``--dp N``), its aborts to that replica only.

``cache_aware`` (the default) sends a prompt to the replica least busy by its own latest report,
unless a replica that was already sent a prompt with the same first KV page is at most
``threshold`` requests busier than the least busy one: that replica holds those pages in its
prefix cache, so it wins (as sglang-router's cache_aware policy does). ``round_robin`` takes
them in turn (for comparison: docs/results/2026-12-02-dp.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from minisgl_core.interfaces import Sender
from minisgl_core.wire import codec
from minisgl_core.wire.schema import Stats, TokenizedRequest

MAX_PREFIXES = 4096  # first-page hashes remembered per replica (LRU)
MAX_OWNERS = 65_536  # request id -> replica, for aborts; an id evicted here is aborted on all
DEFAULT_PAGE_SIZE = 16  # the engine's, until a replica reports its own


class Dispatcher:
    """Picks a replica per request from the replicas' Stats and what was sent since."""

    def __init__(self, outboxes: Sequence[Sender], *, policy: str = "cache_aware",
                 threshold: int = 4, page_size: int | None = None) -> None:
        self.outboxes = list(outboxes)
        self.policy = policy
        self.threshold = threshold
        self.page_size = page_size or DEFAULT_PAGE_SIZE
        n = len(self.outboxes)
        self.sent = [0] * n  # requests sent to each replica
        self.received = [0] * n  # ... that its latest report says it had received
        self.queued = [0] * n  # its running + waiting requests in that report
        self.pages_used = [0] * n  # its KV pages held by requests in that report
        self.prefixes: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(n)]
        self.owners: OrderedDict[str, int] = OrderedDict()
        self._turn = 0

    def update(self, stats: Stats) -> None:
        """A replica's report: its load now (requests sent after it are counted on top)."""
        i = stats.dp_rank
        if i is None or not 0 <= i < len(self.outboxes):
            return
        g = stats.gauges
        self.received[i] = int(stats.counters.get("scheduler_requests_received_total", 0))
        self.queued[i] = int(g.get("requests_running", 0) + g.get("requests_waiting", 0))
        self.pages_used[i] = int(g.get("kv_pages_total", 0) - g.get("kv_pages_free", 0))
        if g.get("kv_page_size"):
            self.page_size = int(g["kv_page_size"])

    def load(self, i: int) -> tuple[int, int]:
        """Replica ``i``'s outstanding requests (reported, plus sent and not yet reported), then
        its KV pages in use: the order replicas are compared in."""
        return self.queued[i] + max(self.sent[i] - self.received[i], 0), self.pages_used[i]

    def pick(self, prompt_ids: Sequence[int]) -> int:
        """The replica for a prompt (and remember that it holds the prompt's first page)."""
        n = len(self.outboxes)
        if self.policy == "round_robin":
            self._turn += 1
            return (self._turn - 1) % n
        loads = [self.load(i) for i in range(n)]
        least = min(range(n), key=loads.__getitem__)
        if len(prompt_ids) <= self.page_size:  # no full page: nothing of it can be cached
            return least
        key = hash(tuple(prompt_ids[: self.page_size]))
        holders = [i for i in range(n) if key in self.prefixes[i]]
        choice = least
        if holders:
            best = min(holders, key=loads.__getitem__)
            if loads[best][0] <= loads[least][0] + self.threshold:
                choice = best
        seen = self.prefixes[choice]
        seen[key] = None
        seen.move_to_end(key)
        if len(seen) > MAX_PREFIXES:
            seen.popitem(last=False)
        return choice

    def send_request(self, req: TokenizedRequest) -> int:
        """Send ``req`` to the replica ``pick`` chooses; return that replica."""
        i = 0 if len(self.outboxes) == 1 else self.pick(req.prompt_ids)
        self.outboxes[i].send(codec.encode(req))
        if len(self.outboxes) > 1:
            self.sent[i] += 1
            self.owners[req.request_id] = i
            if len(self.owners) > MAX_OWNERS:
                self.owners.popitem(last=False)
        return i

    def send_abort(self, request_id: str, data: bytes) -> None:
        """Forward an encoded Abort to the replica that has the request (all, if unknown)."""
        owner = self.owners.get(request_id)
        targets = self.outboxes if owner is None else [self.outboxes[owner]]
        for outbox in targets:
            outbox.send(data)
