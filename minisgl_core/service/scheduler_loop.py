"""The scheduler role's process loop: receive requests, step the role (the Engine, or a plugin's
``interfaces.Scheduler``), emit one delta batch per step."""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from minisgl_core.interfaces import ChannelClosed, Receiver, Scheduler, Sender, StepResult
from minisgl_core.rejection import RequestRejected
from minisgl_core.wire import codec
from minisgl_core.wire.schema import (
    Abort,
    DetokenizeInfo,
    ErrorInfo,
    Message,
    Shutdown,
    Stats,
    TokenBatch,
    TokenDelta,
    TokenizedRequest,
)

log = logging.getLogger(__name__)

MAX_TOMBSTONES = 10_000  # aborts for requests not seen yet; bounded so a flood cannot grow memory
MAX_DRAIN = 1024  # messages taken per step, so a burst cannot starve decoding
IDLE_WAIT_S = 0.5
STATS_INTERVAL_S = 0.1


class SchedulerLoop:
    """Drives one scheduler role: every request ends with exactly one terminal TokenDelta made
    here."""

    def __init__(self, scheduler: Scheduler, inbox: Receiver, outbox: Sender,
                 report: Callable[[Message], None], *, dp_rank: int | None = None) -> None:
        self.scheduler = scheduler
        self.dp_rank = dp_rank  # this replica's index under --dp N (None: the only one)
        self.inbox = inbox
        self.outbox = outbox
        self.report = report
        self.first_delta_info: dict[str, DetokenizeInfo] = {}  # sent with a request's first delta
        self.live: set[str] = set()
        self.tombstones: OrderedDict[str, None] = OrderedDict()
        self.pending: list[TokenDelta] = []
        self.prompt_tokens_total = 0
        self.received_total = 0  # requests that reached this loop (the dispatcher counts on it)
        self.generation_tokens_total = 0
        self.finished_total: dict[str, int] = {}
        self.steps_total = 0
        self.batch_peak = 0  # most requests that got a token in one step, since start
        self._last_stats = 0.0
        self._stats_dirty = True

    def run(self) -> None:
        """Loop until a Shutdown message arrives or the inbox is closed."""
        while True:
            busy = self.scheduler.has_work()
            try:
                messages = self._receive(block=not busy)
            except ChannelClosed:
                return
            for data in messages:
                if self._handle(data):
                    self._flush()
                    return
            if not busy and not messages and hasattr(self.scheduler, "when_idle"):
                # an idle wait ended with nothing to do; True: the engine changed (graphs in)
                self._stats_dirty |= bool(self.scheduler.when_idle())
            if self.scheduler.has_work():
                outputs = self.scheduler.step()
                self._collect(outputs)
                self.steps_total += 1
                self.batch_peak = max(self.batch_peak, len(outputs))
            self._flush()
            self._maybe_report_stats(force=not self.scheduler.has_work())

    def _receive(self, *, block: bool) -> list[bytes]:
        first: bytes | None
        if block:
            try:
                first = self.inbox.recv(timeout=IDLE_WAIT_S)
            except TimeoutError:
                return []
        else:
            first = self.inbox.recv_nowait()
        if first is None:
            return []
        out = [first]
        while len(out) < MAX_DRAIN and (data := self.inbox.recv_nowait()) is not None:
            out.append(data)
        return out

    def _handle(self, data: bytes) -> bool:
        """Handle one inbound message; True means shut down."""
        try:
            msg = codec.decode_scheduler(data)
        except codec.DecodeError as exc:
            log.warning("scheduler dropped a malformed message: %s", exc)
            return False
        self._stats_dirty = True
        match msg:
            case TokenizedRequest():
                self.received_total += 1
                self._add(msg)
            case Abort():
                self._abort(msg.request_id)
            case Shutdown():
                return True
        return False

    def _add(self, req: TokenizedRequest) -> None:
        rid = req.request_id
        if rid in self.live:
            log.warning("dropping a duplicate request id %s", rid)
            return
        if rid in self.tombstones:  # aborted before it got here
            del self.tombstones[rid]
            self._terminal(rid, "abort", req.detokenize, prompt_tokens=len(req.prompt_ids))
            return
        if req.error is not None:
            self._terminal(rid, "error", req.detokenize, error=req.error)
            return
        try:
            self.scheduler.add_request(rid, req.prompt_ids, req.sampling)
        except RequestRejected as exc:  # the client's to fix: the Scheduler Protocol's error
            self._terminal(rid, "error", req.detokenize, prompt_tokens=len(req.prompt_ids),
                           error=exc.info())
            return
        except Exception as exc:  # a bug in the role: this request fails, the loop goes on
            log.exception("the scheduler failed to add request %s", rid)
            self._terminal(rid, "error", req.detokenize, prompt_tokens=len(req.prompt_ids),
                           error=ErrorInfo(message=f"the scheduler failed: {type(exc).__name__}",
                                           type="server_error"))
            return
        self.live.add(rid)
        self.first_delta_info[rid] = req.detokenize
        self.prompt_tokens_total += len(req.prompt_ids)

    def _abort(self, rid: str) -> None:
        if rid in self.live:
            self.scheduler.abort(rid)
            self.live.discard(rid)
            self._terminal(rid, "abort", self.first_delta_info.pop(rid, None))
        elif rid not in self.tombstones:
            self.tombstones[rid] = None
            if len(self.tombstones) > MAX_TOMBSTONES:
                self.tombstones.popitem(last=False)

    def _terminal(self, rid: str, reason: str, info: DetokenizeInfo | None, *,
                  prompt_tokens: int = 0, error: ErrorInfo | None = None) -> None:
        self.finished_total[reason] = self.finished_total.get(reason, 0) + 1
        self.pending.append(TokenDelta(request_id=rid, finish_reason=reason,  # type: ignore[arg-type]
                                       prompt_tokens=prompt_tokens, detokenize=info, error=error))

    def _collect(self, outputs: Sequence[StepResult]) -> None:
        for out in outputs:
            rid = out.request_id
            if rid not in self.live:  # finished or aborted earlier: never emit after a terminal
                continue
            refused = getattr(out, "error", None)  # refused after admission (a grammar)
            if refused is not None:
                self.live.discard(rid)
                self._terminal(rid, "error", self.first_delta_info.pop(rid, None),
                               prompt_tokens=out.prompt_tokens, error=_error_info(refused))
                continue
            self.generation_tokens_total += len(out.token_ids)
            if out.finish_reason is not None:
                self.live.discard(rid)
                self.finished_total[out.finish_reason] = (
                    self.finished_total.get(out.finish_reason, 0) + 1)
            self.pending.append(TokenDelta(
                request_id=rid, token_ids=tuple(out.token_ids), finish_reason=out.finish_reason,
                prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens,
                cached_tokens=out.cached_tokens,
                detokenize=self.first_delta_info.pop(rid, None),
                logprobs=tuple(out.logprobs),
                prompt_logprobs=out.prompt_logprobs))
        if outputs:
            self._stats_dirty = True

    def _flush(self) -> None:
        if self.pending:
            batch, self.pending = TokenBatch(tuple(self.pending)), []
            self.outbox.send(codec.encode(batch))

    def _maybe_report_stats(self, *, force: bool) -> None:
        now = time.monotonic()
        if not self._stats_dirty or (not force and now - self._last_stats < STATS_INTERVAL_S):
            return
        self._last_stats, self._stats_dirty = now, False
        self.report(self.stats())

    def stats(self) -> Stats:
        """The scheduler's gauges and counters, as sent to the launcher for /metrics."""
        s = self.scheduler.stats()
        # kv_pages_free counts pages held only by the prefix cache (evicted on demand), so it is
        # what can be allocated now and equals kv_pages_total when idle
        gauges = {
            "requests_running": float(s.running), "requests_waiting": float(s.waiting),
            "kv_pages_total": float(s.pages_total), "kv_pages_free": float(s.pages_free),
            "scheduler_batch_peak": float(self.batch_peak),
            "kv_pages_cached": float(s.pages_cached),
            "decode_step_compiled": float(getattr(s, "decode_compiled", 0)),
        }
        if getattr(s, "page_size", None):  # tokens per page, for the routers' cache_config_info
            gauges["kv_page_size"] = float(s.page_size)
        counters = {"scheduler_requests_received_total": float(self.received_total),
                    "scheduler_prompt_tokens_total": float(self.prompt_tokens_total),
                    "scheduler_generation_tokens_total": float(self.generation_tokens_total),
                    "scheduler_steps_total": float(self.steps_total),
                    "prefix_cache_hit_tokens_total": float(s.cache_hit_tokens),
                    # speculation (0 when off, or for a scheduler without it)
                    "spec_draft_tokens_total": float(getattr(s, "spec_draft_tokens", 0)),
                    "spec_accepted_tokens_total": float(getattr(s, "spec_accepted_tokens", 0))}
        counters.update({f"scheduler_finished_{k}_total": float(v)
                         for k, v in self.finished_total.items()})
        for name, value in getattr(s, "prefix_tiers", ()):  # hits, misses, bytes by tier
            (counters if name.endswith("_total") else gauges)[name] = value
        return Stats(process=f"scheduler:{os.getpid()}", gauges=gauges, counters=counters,
                     dp_rank=self.dp_rank)


def _error_info(refused: object) -> ErrorInfo:
    """A late refusal as the client sees it: a RequestRejected is theirs to fix, else ours."""
    if isinstance(refused, RequestRejected):
        return refused.info()
    return ErrorInfo(message=str(refused), type="server_error")
