"""One HTTP request's engine requests (n choices x prompts), merged into a single event stream.

Each choice is pumped by its own task into one queue, so a slow choice never blocks another and
closing the Generation cancels every pump: the EngineClient's iterator is closed, which aborts the
request in the scheduler. Latency and token counters are recorded per choice as it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from minisgl_core.api import (
    EngineOverloaded,
    EngineUnavailable,
    GenerateRequest,
    TextDelta,
    TextLogprob,
    TextPromptLogprobs,
)
from minisgl_frontend_openai.errors import APIError, engine_aborted, from_error_info
from minisgl_frontend_openai.metrics import FrontendMetrics

log = logging.getLogger(__name__)

_Item = tuple[int, TextDelta | APIError]


class Generates(Protocol):
    """What a Generation needs of the engine: an EngineClient's ``generate``."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        """The request's deltas (see ``EngineClient.generate``)."""


@dataclass
class ChoiceState:
    """What one choice has produced so far."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)  # under --reasoning-parser
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TextLogprob] = field(default_factory=list)  # when the request asked
    prompt_logprobs: TextPromptLogprobs | None = None  # when the request asked
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tool_parser: str | None = None  # a chat with tools: the format the engine names
    stop_string: str | None = None  # the stop string that ended the text, if one did


@dataclass(frozen=True)
class Usage:
    """Token counts of a whole HTTP request."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int

    def as_dict(self) -> dict[str, object]:
        """The OpenAI ``usage`` object (cached tokens only when there are some)."""
        out: dict[str, object] = {"prompt_tokens": self.prompt_tokens,
                                  "completion_tokens": self.completion_tokens,
                                  "total_tokens": self.prompt_tokens + self.completion_tokens}
        if self.cached_tokens > 0:
            out["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return out


class Generation:
    """The engine requests behind one HTTP request; choice i belongs to prompt i // group_size."""

    def __init__(self, client: Generates, requests: Sequence[GenerateRequest],
                 metrics: FrontendMetrics, *, group_size: int) -> None:
        self._client = client
        self._requests = list(requests)
        self._metrics = metrics
        self._group_size = group_size
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._buffer: list[_Item] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.choices = [ChoiceState() for _ in self._requests]
        self._unfinished = len(self._requests)

    def start(self) -> None:
        """Submit every engine request (each pump task holds its iterator)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._pump(i, r)) for i, r in enumerate(self._requests)]

    async def prelude(self) -> None:
        """Wait until every choice produced its first delta (or raise its APIError).

        Tokenization-dependent errors (a prompt longer than the context) arrive as a choice's
        first delta, so waiting for it lets the caller still answer with a 4xx status.
        """
        seen: set[int] = set()
        while len(seen) < len(self._requests):
            item = await self._queue.get()
            self._buffer.append(item)
            _raise_if_error(item)
            seen.add(item[0])

    async def events(self) -> AsyncIterator[tuple[int, TextDelta]]:
        """Every delta of every choice in arrival order, until all finished; raises APIError."""
        while self._unfinished:
            item = self._buffer.pop(0) if self._buffer else await self._queue.get()
            index, delta = item
            _raise_if_error(item)
            assert isinstance(delta, TextDelta)
            state = self.choices[index]
            state.text.append(delta.text)
            if delta.reasoning:
                state.reasoning.append(delta.reasoning)
            if delta.tool_parser is not None:
                state.tool_parser = delta.tool_parser
            state.token_ids.extend(delta.token_ids)
            state.logprobs.extend(delta.logprobs)
            if delta.prompt_logprobs is not None:
                state.prompt_logprobs = delta.prompt_logprobs
            if delta.finish_reason is not None:
                state.finish_reason = delta.finish_reason
                state.prompt_tokens = delta.prompt_tokens
                state.completion_tokens = delta.completion_tokens
                state.cached_tokens = delta.cached_tokens
                state.stop_string = delta.stop_string
                self._unfinished -= 1
            yield index, delta

    async def collect(self) -> None:
        """Run every choice to its end (non-streaming)."""
        async for _ in self.events():
            pass

    def usage(self) -> Usage:
        """Prompt tokens once per prompt (not per choice), completion tokens of every choice."""
        groups = [self.choices[i:i + self._group_size]
                  for i in range(0, len(self.choices), self._group_size)]
        return Usage(
            prompt_tokens=sum(max(c.prompt_tokens for c in g) for g in groups),
            completion_tokens=sum(c.completion_tokens for c in self.choices),
            # siblings of one prompt may hit the prefix cache; count what all of them had to skip
            cached_tokens=sum(min(c.cached_tokens for c in g) for g in groups))

    def fail(self, error: APIError) -> None:
        """End the whole generation with ``error`` (e.g. the server is shutting down)."""
        self._queue.put_nowait((0, error))

    async def aclose(self) -> None:
        """Abort whatever has not finished; idempotent and safe to call from ``finally``."""
        for task in self._tasks:
            task.cancel()  # before any await: aborts go out even if this await is cancelled
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _pump(self, index: int, request: GenerateRequest) -> None:
        metrics = self._metrics
        metrics.inflight += 1
        start = time.monotonic()
        first: float | None = None
        last: float | None = None
        reason = "abort"
        counted: TextDelta | None = None  # the latest delta with trustworthy token counts
        stream: AsyncIterator[TextDelta] | None = None
        try:
            stream = self._client.generate(request)
            async for delta in stream:
                if first is None and (delta.text or delta.token_ids or delta.completion_tokens):
                    first = time.monotonic()
                if delta.finish_reason not in ("error", "abort"):
                    counted = delta  # a rejected request's prompt was never computed
                if delta.finish_reason is not None:
                    reason, last = delta.finish_reason, time.monotonic()
                    if delta.finish_reason == "abort":
                        self._queue.put_nowait((index, engine_aborted()))
                    elif delta.finish_reason == "error":
                        self._queue.put_nowait((index, from_error_info(delta.error)))
                    else:
                        self._queue.put_nowait((index, delta))
                    return
                self._queue.put_nowait((index, delta))
            reason = "error"
            self._queue.put_nowait((index, APIError(
                500, "the engine stream ended without a finish reason", type="server_error")))
        except EngineOverloaded as exc:
            reason = "error"
            self._queue.put_nowait((index, APIError(429, str(exc) or "the engine is overloaded",
                                                    type="overloaded_error", code="overloaded")))
        except EngineUnavailable as exc:
            reason = "error"
            self._queue.put_nowait((index, APIError(
                503, str(exc) or "the engine is unavailable", type="server_error",
                code="engine_unavailable")))
        except Exception as exc:  # noqa: BLE001 - any engine failure becomes a 500 for this request
            log.exception("engine request %s failed", request.request_id)
            reason = "error"
            self._queue.put_nowait((index, APIError(500, f"internal error: {type(exc).__name__}",
                                                    type="server_error")))
        finally:
            if stream is not None:
                closer = getattr(stream, "aclose", None)
                if closer is not None:
                    with contextlib.suppress(Exception):
                        await closer()
            metrics.inflight -= 1
            tokens = counted.completion_tokens if counted is not None else 0
            metrics.record_finish(
                reason, prompt_tokens=counted.prompt_tokens if counted is not None else 0,
                completion_tokens=tokens, ttft=None if first is None else first - start,
                tpot=(last - first) / (tokens - 1)
                if first is not None and last is not None and tokens > 1 else None)


def _raise_if_error(item: _Item) -> None:
    if isinstance(item[1], APIError):
        raise item[1]
