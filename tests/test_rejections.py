"""One way to say no: every check raises RequestRejected, the synthetic scheduler admits with the
engine's own function, and the scheduler loop passes a rejection on as the client's error (any
other failure as the server's)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from minisgl_core.api import InprocTransport, RequestRejected, ToolRequestError, tool_request
from minisgl_core.default_plugins.synthetic import SyntheticScheduler
from minisgl_core.engine.admission import Limits, admit
from minisgl_core.service.scheduler_loop import SchedulerLoop
from minisgl_core.wire import codec
from minisgl_core.wire.schema import (
    DetokenizeInfo,
    ErrorInfo,
    SamplingParams,
    Shutdown,
    TokenBatch,
    TokenDelta,
    TokenizedRequest,
)

LIMITS = Limits(vocab_size=100, max_seq_len=32, page_size=4, num_pages=6)


def test_a_rejection_travels_as_its_error_info_and_back() -> None:
    exc = RequestRejected("too long", code="context_length_exceeded", param="max_tokens")
    info = exc.info()
    assert info == ErrorInfo("too long", "invalid_request_error", "context_length_exceeded",
                             "max_tokens")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(info), type=ErrorInfo) == info
    back = RequestRejected.from_info(info)
    assert (back.message, back.code, back.param) == ("too long", "context_length_exceeded",
                                                    "max_tokens")
    assert isinstance(exc, ValueError) and str(exc) == "too long"


def test_tool_errors_are_rejections() -> None:
    with pytest.raises(RequestRejected) as info:
        tool_request(None, "required", None)
    assert isinstance(info.value, ToolRequestError)
    assert info.value.info().param == "tool_choice"


BAD = [  # (prompt, sampling, code): one per admission check
    ((), SamplingParams(), "empty_prompt"),
    ((5, 100), SamplingParams(), "invalid_token_ids"),
    ((5,), SamplingParams(logit_bias=((100, 1.0),)), "invalid_token_ids"),
    (tuple(range(32)), SamplingParams(max_tokens=None), "context_length_exceeded"),
    ((5, 6), SamplingParams(max_tokens=31), "context_length_exceeded"),
    ((5, 6), SamplingParams(max_tokens=24), "kv_cache_exceeded"),  # 25 tokens: 7 pages of 4
]


@pytest.mark.parametrize(("prompt", "sampling", "code"), BAD, ids=[c for *_, c in BAD])
def test_the_synthetic_scheduler_refuses_as_admit_does(prompt: tuple[int, ...],
                                                      sampling: SamplingParams, code: str) -> None:
    with pytest.raises(RequestRejected) as expected:
        admit("r", prompt, sampling, LIMITS)
    role = SyntheticScheduler(vocab_size=100, max_seq_len=32, num_pages=6, page_size=4)
    with pytest.raises(RequestRejected) as got:
        role.add_request("r", prompt, sampling)
    assert got.value.code == expected.value.code == code
    assert got.value.message == expected.value.message
    assert role.requests == {} and role.free_pages == 6  # nothing of it is kept


def test_admit_resolves_what_the_request_holds() -> None:
    admitted = admit("r", (5, 6, 7), SamplingParams(max_tokens=None),
                     Limits(vocab_size=100, max_seq_len=32, page_size=4, num_pages=8))
    # up to the context: 29 new tokens, and (3 + 29 - 1) tokens of KV in 8 pages of 4
    assert (admitted.prompt, admitted.max_tokens, admitted.pages) == ([5, 6, 7], 29, 8)
    with pytest.raises(RequestRejected) as info:
        admit("r", (5,), SamplingParams(max_tokens=2), LIMITS, in_use={"r"})
    assert info.value.code == "duplicate_request_id"


class Buggy(SyntheticScheduler):
    """A scheduler whose add_request fails by a bug of its own for one prompt."""

    def add_request(self, request_id: str, prompt_ids: Sequence[int],
                    sampling: SamplingParams) -> None:
        if list(prompt_ids) == [13]:
            raise KeyError("bug")
        super().add_request(request_id, prompt_ids, sampling)


def _terminals(requests: list[TokenizedRequest], tmp_path: Path) -> dict[str, TokenDelta]:
    """Run the scheduler loop on inproc channels until each of ``requests`` ended; each one's
    terminal delta."""
    transport = InprocTransport()
    inbox_ep = transport.endpoint(tmp_path, "scheduler")
    outbox_ep = transport.endpoint(tmp_path, "detokenizer")
    inbox, results = transport.pull(inbox_ep, bind=True), transport.pull(outbox_ep, bind=True)
    loop = SchedulerLoop(Buggy(vocab_size=100, max_seq_len=32, num_pages=6, page_size=4),
                         inbox, transport.push(outbox_ep), lambda msg: None)
    worker = threading.Thread(target=loop.run)
    worker.start()
    sender = transport.push(inbox_ep)
    ends: dict[str, TokenDelta] = {}
    try:
        for req in requests:
            sender.send(codec.encode(req))
        while len(ends) < len(requests):
            batch = codec.decode_detokenizer(results.recv(timeout=60))  # TimeoutError: stuck
            assert isinstance(batch, TokenBatch)
            ends.update({d.request_id: d for d in batch.deltas if d.finish_reason is not None})
    finally:
        sender.send(codec.encode(Shutdown()))
        worker.join(timeout=60)
        transport.close()
    assert not worker.is_alive(), "the scheduler loop did not stop on Shutdown within 60 s"
    return ends


def test_the_loop_passes_a_rejection_on_as_the_clients_error(tmp_path: Path) -> None:
    info = DetokenizeInfo(owner="fe")
    requests = [
        TokenizedRequest("long", (5, 6), SamplingParams(max_tokens=31), info),
        TokenizedRequest("bug", (13,), SamplingParams(max_tokens=2), info),
        TokenizedRequest("ok", (5, 6), SamplingParams(max_tokens=2), info),
    ]
    ends = _terminals(requests, tmp_path)
    long, bug = ends["long"].error, ends["bug"].error
    assert long is not None and long.type == "invalid_request_error"
    assert long.code == "context_length_exceeded"
    assert bug is not None and bug.type == "server_error" and bug.code is None
    assert "KeyError" in bug.message and ends["bug"].finish_reason == "error"
    assert ends["ok"].finish_reason == "length" and ends["ok"].error is None
