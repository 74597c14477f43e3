"""The tokenizer and detokenizer process loops: thin shells around the text roles."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from minisgl_core.interfaces import (
    ChannelClosed,
    Detokenizer,
    Receiver,
    Sender,
    Tokenizer,
    TokenizerCalls,
)
from minisgl_core.rejection import RequestRejected
from minisgl_core.service.dispatch import Dispatcher
from minisgl_core.wire import codec
from minisgl_core.wire.schema import (
    Abort,
    DetokenizeCall,
    ErrorInfo,
    GenerateRequest,
    Message,
    Shutdown,
    Stats,
    TextBatch,
    TokenBatch,
    TokenizeCall,
    TokenizerReply,
)

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.2


def _received(inbox: Receiver, decode: Callable[[bytes], Any], who: str,
              idle_after: Callable[[], float | None] = lambda: None,
              ) -> Iterator[tuple[bytes, Any] | None]:
    """Yield ``(raw, decoded)`` for each message until the inbox closes; drop malformed ones.

    Yields None when no message came for ``idle_after()`` seconds (None: wait for ever).
    """
    while True:
        try:
            data = inbox.recv(timeout=idle_after())
        except TimeoutError:
            yield None
            continue
        except ChannelClosed:
            return
        try:
            msg = decode(data)
        except codec.DecodeError as exc:
            log.warning("%s dropped a malformed message: %s", who, exc)
            continue
        yield data, msg


def run_tokenizer(role: Tokenizer, inbox: Receiver, outbox: Sender | Dispatcher,
                  report: Callable[[Message], None] = lambda msg: None,
                  frontends: Mapping[str, Sender] | None = None) -> None:
    """Tokenize requests and forward aborts on the same path, in arrival order; answer the
    frontends' tokenize and detokenize calls on ``frontends`` (frontend id -> its channel).

    Reports how many requests it has passed on (``tokenizer_requests_total``): at most every
    STATS_INTERVAL_S while busy, and once more as soon as it is idle, so the last of a burst
    is always counted. ``outbox`` is the scheduler's channel, or a Dispatcher over the
    replicas' (``--dp N``), which the replicas' Stats reach here to keep up to date.
    """
    dispatch = outbox if isinstance(outbox, Dispatcher) else Dispatcher([outbox])
    forwarded, reported = 0, -1  # -1: the first report (0) goes out once idle
    last_report = 0.0

    def idle_after() -> float | None:
        return STATS_INTERVAL_S if forwarded != reported else None

    for item in _received(inbox, codec.decode_tokenizer, "tokenizer", idle_after):
        if item is not None:
            data, msg = item
            match msg:
                case GenerateRequest():
                    dispatch.send_request(role.tokenize(msg))
                    forwarded += 1
                case TokenizeCall() | DetokenizeCall():
                    reply = answer_call(role, msg)
                    sender = (frontends or {}).get(msg.owner)
                    if sender is None:
                        log.warning("no frontend %r: dropped a reply", msg.owner)
                    else:
                        sender.send(codec.encode(reply))
                case Abort():
                    dispatch.send_abort(msg.request_id, data)
                case Stats():
                    dispatch.update(msg)
                case Shutdown():
                    return
        now = time.monotonic()
        if forwarded != reported and (item is None or now - last_report > STATS_INTERVAL_S):
            reported, last_report = forwarded, now
            report(Stats(process=f"tokenizer:{os.getpid()}",
                         counters={"tokenizer_requests_total": float(forwarded)}))


def answer_call(role: Tokenizer, call: TokenizeCall | DetokenizeCall) -> TokenizerReply:
    """The role's reply to a frontend's call; a rejection or a failure becomes its error."""
    if not isinstance(role, TokenizerCalls):
        return TokenizerReply(call.call_id, error=ErrorInfo(
            f"the tokenizer role {type(role).__name__} does not answer tokenize calls",
            type="server_error", code="not_implemented"))
    try:
        if isinstance(call, TokenizeCall):
            return role.tokenize_call(call)
        return role.detokenize_call(call)
    except RequestRejected as exc:
        return TokenizerReply(call.call_id, error=exc.info())
    except Exception as exc:  # a tokenizer bug must not take the process down
        log.exception("the tokenizer failed to answer a %s", type(call).__name__)
        return TokenizerReply(call.call_id, error=ErrorInfo(
            f"the tokenizer failed: {type(exc).__name__}", type="server_error"))


def run_detokenizer(role: Detokenizer, inbox: Receiver, outboxes: dict[str, Sender],
                    report: Callable[[Message], None]) -> None:
    """Turn each step's token deltas into text deltas and route them to their frontends."""
    reported, last_report = -1, 0.0
    for item in _received(inbox, codec.decode_detokenizer, "detokenizer"):
        assert item is not None  # no idle timeout here
        match item[1]:
            case TokenBatch() as msg:
                for owner, deltas in role.process(msg).items():
                    sender = outboxes.get(owner)
                    if sender is None:
                        log.warning("no frontend %r: dropped %d deltas", owner, len(deltas))
                        continue
                    sender.send(codec.encode(TextBatch(tuple(deltas))))
                active, now = role.active_count(), time.monotonic()
                if active != reported and (active == 0 or now - last_report > STATS_INTERVAL_S):
                    reported, last_report = active, now
                    report(Stats(process=f"detokenizer:{os.getpid()}",
                                 gauges={"detokenizer_requests_active": float(active)}))
            case Shutdown():
                return
