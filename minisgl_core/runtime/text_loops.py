"""The tokenizer and detokenizer process loops: thin shells around the text roles."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from minisgl_core import codec
from minisgl_core.interfaces import ChannelClosed, Receiver, Sender
from minisgl_core.messages import (
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


def run_tokenizer(role: Any, inbox: Receiver, outbox: Sender) -> None:
    """Tokenize requests and forward aborts on the same path, in arrival order."""
    while True:
        try:
            data = inbox.recv()
        except ChannelClosed:
            return
        try:
            msg = codec.decode_tokenizer(data)
        except codec.DecodeError as exc:
            log.warning("tokenizer dropped a malformed message: %s", exc)
            continue
        match msg:
            case GenerateRequest():
                outbox.send(codec.encode(role.tokenize(msg)))
            case Abort():
                outbox.send(data)
            case Shutdown():
                return


def run_detokenizer(role: Any, inbox: Receiver, outboxes: dict[str, Sender],
                    report: Callable[[Message], None]) -> None:
    """Turn each step's token deltas into text deltas and route them to their frontends."""
    reported, last_report = -1, 0.0
    while True:
        try:
            data = inbox.recv()
        except ChannelClosed:
            return
        try:
            msg = codec.decode_detokenizer(data)
        except codec.DecodeError as exc:
            log.warning("detokenizer dropped a malformed message: %s", exc)
            continue
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
