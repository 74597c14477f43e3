"""TransportEngineClient: the EngineClient frontends get, reaching the workers by transport."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from minisgl_core.engine_client import EngineOverloaded, EngineUnavailable
from minisgl_core.interfaces import ChannelClosed
from minisgl_core.wire import codec
from minisgl_core.wire.schema import (
    Abort,
    DetokenizeCall,
    ErrorInfo,
    GenerateRequest,
    Shutdown,
    Stats,
    TextBatch,
    TextDelta,
    TokenizeCall,
    TokenizerReply,
)

if TYPE_CHECKING:
    from minisgl_core.interfaces import Transport

log = logging.getLogger(__name__)


# the Ready keys shown as /v1/models meta and on the dashboard
ENGINE_FACTS = ("dtype", "dtype_reason", "quantization", "quantization_reason", "kv_cache_dtype",
                "kernels", "compile", "compile_reason", "weight_bytes", "weight_huge_page_bytes",
                "omp_wait")
NOT_SUMMED = {"kv_page_size": max, "scheduler_batch_peak": max,  # over replicas
              "decode_step_compiled": min}


def replica_metrics(replicas: Mapping[int, Mapping[str, float]]) -> dict[str, float]:
    """The replicas' reports under ``--dp N``: each value as ``name{dp_rank="i"}``, and the
    total over replicas as ``name`` (a sum; the largest for the keys of NOT_SUMMED)."""
    out: dict[str, float] = {}
    for rank in sorted(replicas):
        for key, value in replicas[rank].items():
            out[f'{key}{{dp_rank="{rank}"}}'] = value
            combine = NOT_SUMMED.get(key)
            out[key] = value if key not in out else (
                combine(out[key], value) if combine else out[key] + value)
    return out


class TransportEngineClient:
    """Submits requests to the tokenizer channel and routes TextDeltas back to their streams.

    Owns one inbound channel (``frontend.<id>``), bound at construction so that it exists before
    any worker starts. One reader task drains it; each request has its own asyncio.Queue, each
    tokenize or detokenize call its own future.
    """

    def __init__(self, transport: Transport, inbox_endpoint: str, tokenizer_endpoint: str,
                 frontend_id: str, *, max_waiting: int = 1024) -> None:
        self._transport = transport
        self._inbox = transport.pull(inbox_endpoint, bind=True)
        self._outbox: Any = None
        self._tokenizer_endpoint = tokenizer_endpoint
        self._frontend_id = frontend_id
        self._max_waiting = max_waiting
        self._streams: dict[str, asyncio.Queue[TextDelta]] = {}  # by wire id
        self._wire_ids: dict[str, str] = {}  # frontend's request id -> wire id
        self._calls: dict[str, asyncio.Future[TokenizerReply]] = {}  # by call id
        self._plugins: tuple[dict[str, Any], ...] = ()
        self._counter = 0
        self._reader: asyncio.Task[None] | None = None
        self._healthy = False
        self._down_reason = "the engine is starting"
        self._reports: dict[str, dict[str, float]] = {}  # process -> its latest Stats, whole
        self._metrics: dict[str, float] = {}  # every process's latest report, merged
        self._replicas: dict[int, dict[str, float]] = {}  # --dp N: each replica's latest report
        self.model_name_value = "default"
        self.max_context_value = 0
        # what the engine runs in (dtype and why, quantization, kernels), from its Ready
        self.engine_facts: dict[str, str] = {}

    # ---- EngineClient protocol --------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """The served model's name."""
        return self.model_name_value

    @property
    def max_context(self) -> int:
        """The longest prompt + completion the engine accepts, in tokens."""
        return self.max_context_value

    @property
    def frontend_id(self) -> str:
        """The owner id of this client's requests."""
        return self._frontend_id

    def healthy(self) -> bool:
        """True while every worker is up."""
        return self._healthy

    def metrics(self) -> dict[str, float]:
        """The latest worker gauges and counters (each worker's from one report)."""
        return dict(self._metrics)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        """Submit a request and yield its TextDeltas until the terminal one."""
        if not self._healthy:
            raise EngineUnavailable(self._down_reason)
        # Stats lag a burst: what was sent and is not yet reported running is waiting too.
        queued = len(self._streams) - self._metrics.get("requests_running", 0)
        if max(self._metrics.get("requests_waiting", 0), queued) >= self._max_waiting:
            raise EngineOverloaded(
                f"the waiting queue is full ({self._max_waiting} requests); retry later")
        # Ids on the wire are made here, unique per run: a client-chosen id may repeat.
        self._counter += 1
        rid = f"{self._frontend_id}-{self._counter}"
        queue: asyncio.Queue[TextDelta] = asyncio.Queue()
        self._streams[rid] = queue
        self._wire_ids[request.request_id] = rid
        finished = False
        try:
            self._send(codec.encode(msgspec.structs.replace(
                request, request_id=rid, owner=self._frontend_id,
                arrival_time=request.arrival_time or time.time())))
            while True:
                delta = await queue.get()
                if delta.finish_reason is not None:
                    finished = True
                yield delta
                if finished:
                    return
        finally:
            self._streams.pop(rid, None)
            if self._wire_ids.get(request.request_id) == rid:
                del self._wire_ids[request.request_id]
            if not finished:
                self._send_abort(rid)

    async def tokenize(self, request: GenerateRequest, *, add_special_tokens: bool | None = None,
                       add_generation_prompt: bool = True, token_strs: bool = False
                       ) -> TokenizerReply:
        """The prompt ids ``request`` would send, from the tokenizer process."""
        request = msgspec.structs.replace(request, owner=self._frontend_id)
        return await self._call(TokenizeCall(
            self._call_id(), self._frontend_id, request, add_special_tokens=add_special_tokens,
            add_generation_prompt=add_generation_prompt, token_strs=token_strs))

    async def detokenize(self, token_ids: Sequence[int]) -> TokenizerReply:
        """``token_ids`` as text, from the tokenizer process."""
        return await self._call(DetokenizeCall(self._call_id(), self._frontend_id,
                                               tuple(token_ids)))

    def plugins(self) -> list[dict[str, Any]]:
        """The service's plugins, as ``minisgl plugins --json`` lists them."""
        return [dict(row) for row in self._plugins]

    async def abort(self, request_id: str) -> None:
        """Abort a request by the id its frontend gave it; idempotent."""
        rid = self._wire_ids.get(request_id)
        if rid is not None:
            self._send_abort(rid)

    # ---- lifecycle, driven by the launcher --------------------------------------------------

    def start(self) -> None:
        """Start the reader task; call from the serving event loop once the workers are ready."""
        self._outbox = self._transport.push(self._tokenizer_endpoint)
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    def set_ready(self, info: dict[str, str]) -> None:
        """Mark the engine up, with the facts the scheduler reported in its Ready."""
        self.model_name_value = info.get("model_name", self.model_name_value)
        self.max_context_value = int(info.get("max_seq_len", self.max_context_value))
        self.engine_facts = {k: str(info[k]) for k in ENGINE_FACTS if k in info}
        self._healthy = True

    def set_plugins(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """What ``plugins()`` reports: the launcher's own plugin listing."""
        self._plugins = tuple(dict(row) for row in rows)

    def update_metrics(self, stats: Stats) -> None:
        """Keep a worker's latest Stats whole, in place of its previous one.

        One report is one moment of its process (the scheduler takes its gauges together,
        between steps), and ``metrics()`` hands out a copy made here, so a reader never sees
        one report's running requests beside another's pages.
        """
        values = {**stats.gauges, **stats.counters}
        if stats.dp_rank is not None:
            self._replicas[stats.dp_rank] = values
        else:
            self._reports[stats.process] = values
        merged: dict[str, float] = {}
        for values in self._reports.values():
            merged.update(values)
        merged.update(replica_metrics(self._replicas))
        self._metrics = merged

    def fail_all(self, reason: str) -> None:
        """The engine is gone: end every in-flight stream with an error, refuse new requests."""
        self._healthy = False
        self._down_reason = reason
        error = ErrorInfo(message=reason, type="server_error", code="engine_unavailable")
        for rid, queue in list(self._streams.items()):
            queue.put_nowait(TextDelta(request_id=rid, finish_reason="error", error=error))
        for call_id, future in list(self._calls.items()):
            if not future.done():
                future.set_result(TokenizerReply(call_id, error=error))

    def in_flight(self) -> int:
        """How many requests this client is waiting on (0 when idle)."""
        return len(self._streams)

    async def close(self) -> None:
        """Stop the reader and close the channels."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, ChannelClosed):
                await self._reader
        self._inbox.close()
        if self._outbox is not None:
            self._outbox.close()

    # ---- internals -------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        if not self._healthy or self._outbox is None:
            raise EngineUnavailable(self._down_reason)
        self._outbox.send(data)

    def _call_id(self) -> str:
        self._counter += 1
        return f"{self._frontend_id}-call-{self._counter}"

    async def _call(self, call: TokenizeCall | DetokenizeCall) -> TokenizerReply:
        future: asyncio.Future[TokenizerReply] = asyncio.get_running_loop().create_future()
        self._calls[call.call_id] = future
        try:
            self._send(codec.encode(call))
            return await future
        finally:
            self._calls.pop(call.call_id, None)

    def _send_abort(self, rid: str) -> None:
        if self._healthy and self._outbox is not None:
            self._outbox.send(codec.encode(Abort(request_id=rid)))

    async def _read_loop(self) -> None:
        while True:
            try:
                data = await self._inbox.arecv()
            except ChannelClosed:
                return
            batches = [data]
            while (more := self._inbox.recv_nowait()) is not None:
                batches.append(more)
            for raw in batches:
                try:
                    msg = codec.decode_frontend(raw)
                except codec.DecodeError as exc:
                    log.warning("frontend dropped a malformed message: %s", exc)
                    continue
                if isinstance(msg, Shutdown):
                    return
                if isinstance(msg, TokenizerReply):
                    future = self._calls.get(msg.call_id)
                    if future is not None and not future.done():  # else: cancelled, gone
                        future.set_result(msg)
                    continue
                assert isinstance(msg, TextBatch)
                for delta in msg.deltas:
                    queue = self._streams.get(delta.request_id)
                    if queue is not None:  # unknown ids (already finished/aborted) are dropped
                        queue.put_nowait(delta)
