"""What a bad request must get back, the frontend's OpenAPI document, and garbage for sockets."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from reliability_support import AUTH, Service

# the log line each receiving loop writes when its typed decoder rejects a message
DROP_LINES = {
    "tokenizer": "tokenizer dropped a malformed message",
    "scheduler": "scheduler dropped a malformed message",
    "detokenizer": "detokenizer dropped a malformed message",
    "control": "launcher dropped a malformed control message",
    "frontend": "frontend dropped a malformed message",
}


def garbage_payloads() -> list[bytes]:
    """Bytes no channel may accept: empty, random, msgpack of the wrong shape or unknown tag."""
    import msgspec

    enc = msgspec.msgpack.encode
    return [b"", b"\x00", b"\xc1", os.urandom(64), os.urandom(70_000), enc([1, 2, 3]),
            enc({"type": "no_such_message"}), enc({"type": "token_batch", "deltas": "x"}),
            enc({"type": "generate", "request_id": 5}), "🙂".encode() * 9]


def check_error_envelope(resp: httpx.Response) -> str | None:
    """None if ``resp`` is a 4xx carrying the OpenAI error envelope, else what is wrong."""
    if not 400 <= resp.status_code < 500:
        return f"status {resp.status_code}: {resp.text[:300]}"
    try:
        err = resp.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"status {resp.status_code} without the error envelope: {resp.text[:300]}"
    if not isinstance(err, dict) or not {"message", "type", "param", "code"} <= set(err):
        return f"incomplete error envelope: {err!r:.300}"
    if not isinstance(err["message"], str) or not err["message"]:
        return f"empty error message: {err!r:.300}"
    return None


def check_answer_or_error(resp: httpx.Response) -> str | None:
    """None if ``resp`` is a 2xx answer or a 4xx with the envelope; never a 5xx."""
    if 200 <= resp.status_code < 300:
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            for line in resp.text.splitlines():
                if line.startswith("data: {") and '"error"' in line[:20]:
                    return f"a 200 stream carried an error event: {line[:300]}"
        return None
    return check_error_envelope(resp)


def served_openapi(svc: Service) -> dict[str, Any] | None:
    """The service's own /openapi.json when it describes the request bodies, else None."""
    resp = httpx.get(f"{svc.url}/openapi.json", headers=AUTH, timeout=10)
    if resp.status_code != 200:
        return None
    doc = resp.json()
    chat = doc.get("paths", {}).get("/v1/chat/completions", {}).get("post", {})
    return doc if "requestBody" in chat else None


@contextlib.contextmanager
def garbage_sent(svc: Service) -> Iterator[list[str]]:
    """Send undecodable messages to every bound socket of the run dir; yield the channels.

    The sending sockets stay open for the block: nng has no linger, so a socket closed at once
    could drop what it has not flushed yet; wait in the block for what the service logs.
    """
    channels = sorted(os.listdir(svc.run_dir))
    with contextlib.ExitStack() as open_senders:
        for name in channels:
            path = svc.run_dir / name
            open_senders.enter_context(
                _transport_sender(svc.spec.transport, f"ipc://{path}", garbage_payloads()))
            _send_raw(path)
        yield channels


@contextlib.contextmanager
def _transport_sender(transport: str, endpoint: str, payloads: list[bytes]) -> Iterator[None]:
    if transport == "zmq":
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 5000)  # let the queue drain before close
        sock.connect(endpoint)
        for p in payloads:
            sock.send(p)
        sock.send_multipart([b"two", b"frames"])
        try:
            yield
        finally:
            sock.close()
            ctx.term()
    else:
        import pynng

        with pynng.Push0(send_timeout=5000) as sock:
            sock.dial(endpoint, block=True)
            for p in payloads:
                sock.send(p)
            yield


def _send_raw(path: Path) -> None:
    """Bytes straight onto the unix socket, below the transport's own framing."""
    for data in (os.urandom(4096), b"GET / HTTP/1.1\r\n\r\n", b"\xff" * 64):
        with socket.socket(socket.AF_UNIX) as raw:
            raw.settimeout(2)
            raw.connect(str(path))
            try:
                raw.sendall(data)
            except OSError:
                pass  # the peer may hang up on us: that is a fine answer


def wait_log(svc: Service, needles: list[str], timeout: float = 60) -> list[str]:
    """The needles still missing from the service log after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        log = svc.log()
        missing = [n for n in needles if n not in log]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.2)


def dumps(body: object) -> bytes:
    return json.dumps(body, allow_nan=True).encode()
