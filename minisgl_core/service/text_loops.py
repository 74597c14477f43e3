"""The tokenizer and detokenizer process loops: thin shells around the text roles."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from minisgl_core.interfaces import ChannelClosed, Detokenizer, Receiver, Sender, Tokenizer
from minisgl_core.wire import codec
from minisgl_core.wire.schema import (
    Abort,
    GenerateRequest,
    Message,
    Shutdown,
    Stats,
    TextBatch,
    TokenBatch,
)

log = logging.getLogger(__name__)

STATS_INTERVAL_S = 0.2


def _received(inbox: Receiver, decode: Callable[[bytes], Any],
              who: str) -> Iterator[tuple[bytes, Any]]:
    """Yield ``(raw, decoded)`` for each message until the inbox closes; drop malformed ones."""
    while True:
        try:
            data = inbox.recv()
        except ChannelClosed:
            return
        try:
            msg = decode(data)
        except codec.DecodeError as exc:
            log.warning("%s dropped a malformed message: %s", who, exc)
            continue
        yield data, msg


def run_tokenizer(role: Tokenizer, inbox: Receiver, outbox: Sender) -> None:
    """Tokenize requests and forward aborts on the same path, in arrival order."""
    for data, msg in _received(inbox, codec.decode_tokenizer, "tokenizer"):
        match msg:
            case GenerateRequest():
                outbox.send(codec.encode(role.tokenize(msg)))
            case Abort():
                outbox.send(data)
            case Shutdown():
                return


def run_detokenizer(role: Detokenizer, inbox: Receiver, outboxes: dict[str, Sender],
                    report: Callable[[Message], None]) -> None:
    """Turn each step's token deltas into text deltas and route them to their frontends."""
    reported, last_report = -1, 0.0
    for _, msg in _received(inbox, codec.decode_detokenizer, "detokenizer"):
        match msg:
            case TokenBatch():
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
