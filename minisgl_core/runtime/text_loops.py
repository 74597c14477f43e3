"""The tokenizer and detokenizer process loops: thin shells around the text roles."""

from __future__ import annotations

import logging
from typing import Any

from minisgl_core import codec
from minisgl_core.interfaces import ChannelClosed, Receiver, Sender
from minisgl_core.messages import (
    Abort,
    GenerateRequest,
    Shutdown,
    TextBatch,
    TokenBatch,
)

log = logging.getLogger(__name__)


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


def run_detokenizer(role: Any, inbox: Receiver, outboxes: dict[str, Sender]) -> None:
    """Turn each step's token deltas into text deltas and route them to their frontends."""
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
            case Shutdown():
                return
