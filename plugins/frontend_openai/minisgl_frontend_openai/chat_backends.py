"""Where ``minisgl chat`` gets its answers: a running service (streamed over the OpenAI SSE API,
with nothing but the standard library) or, offline, an engine in this process."""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import signal
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Message = Mapping[str, str]
POLL_S = 0.05  # how often a streaming answer looks at its stop flag while it waits


class ChatError(Exception):
    """A turn that failed: the service refused it, or cannot be reached."""


@dataclass(frozen=True)
class Params:
    """Sampling parameters for every turn (None: the server's default)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None


@dataclass
class Outcome:
    """How the last turn ended (filled in while its stream is read)."""

    finish_reason: str | None = None
    completion_tokens: int | None = None  # None: not reported (e.g. stopped early)


class HttpBackend:
    """Streams answers from ``/v1/chat/completions`` of a running service."""

    def __init__(self, url: str, api_key: str | None, model: str | None, params: Params,
                 *, timeout: float = 600.0) -> None:
        base = url.rstrip("/")
        self.base = base[: -len("/v1")] if base.endswith("/v1") else base
        self.api_key = api_key
        self.params = params
        self.timeout = timeout
        self.model = model or self._served_model()
        self.outcome = Outcome()

    def describe(self) -> str:
        """One line for the banner."""
        return f"{self.model} at {self.base}"

    def _headers(self, body: bool) -> dict[str, str]:
        headers = {"Content-Type": "application/json"} if body else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _served_model(self) -> str:
        request = urllib.request.Request(self.base + "/v1/models", headers=self._headers(False))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                return str(json.load(resp)["data"][0]["id"])
        except urllib.error.HTTPError as exc:
            raise ChatError(f"{exc.code}: {_error_message(exc.read(), exc.reason)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ChatError(f"cannot reach {self.base}: {reason}") from None

    def stream(self, messages: Sequence[Message],
               stopped: Callable[[], bool] = lambda: False) -> Iterator[str]:
        """Yield the answer's text as it arrives, until it ends or ``stopped()`` turns true.

        The HTTP exchange runs on a thread of its own, so this generator never blocks in a
        socket call: it sees ``stopped()`` within ``POLL_S`` at every moment (connecting,
        waiting for the first byte, between chunks). Stopping, like closing the generator,
        shuts the connection down, which the service takes as an abort.
        """
        self.outcome = outcome = Outcome()
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "stream": True,
                                "stream_options": {"include_usage": True}}
        body.update({k: v for k, v in vars(self.params).items() if v is not None})
        exchange = _Exchange(self.base, "/v1/chat/completions", json.dumps(body).encode(),
                             self._headers(True), self.timeout)
        exchange.start()
        try:
            while not stopped():
                try:
                    kind, value = exchange.events.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if kind == "error":
                    raise ChatError(value)
                if kind == "end":
                    return
                line = value.strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise ChatError(str(event["error"].get("message", "the stream failed")))
                if event.get("usage"):
                    outcome.completion_tokens = int(event["usage"]["completion_tokens"])
                for choice in event.get("choices", []):
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        yield text
                    if choice.get("finish_reason"):
                        outcome.finish_reason = str(choice["finish_reason"])
        finally:
            exchange.cancel()


class _Exchange(threading.Thread):
    """One streamed POST on a daemon thread: its SSE lines, an error or the end, on a queue.

    ``cancel`` may come at any moment: while connecting (the request is then never sent), while
    waiting for the response, or between lines (the socket is shut down, which ends the read).
    """

    def __init__(self, base: str, path: str, body: bytes, headers: dict[str, str],
                 timeout: float) -> None:
        super().__init__(name="minisgl-chat-http", daemon=True)
        self.base, self.path, self.body, self.headers = base, path, body, headers
        self.timeout = timeout
        self.events: queue.Queue[tuple[str, str]] = queue.Queue()
        self._lock = threading.Lock()
        self._cancelled = False
        self._conn: http.client.HTTPConnection | None = None

    def cancel(self) -> None:
        """Stop the exchange; the service sees the connection close (and aborts the answer)."""
        with self._lock:
            self._cancelled = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        # Ctrl-C is for the main thread: it must not interrupt this one's system calls
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        url = urllib.parse.urlsplit(self.base)
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = kind(url.hostname or "127.0.0.1", url.port, timeout=self.timeout)
        try:
            try:
                conn.connect()
            except OSError as exc:
                self._fail(f"cannot reach {self.base}: {exc}")
                return
            with self._lock:
                if self._cancelled:  # stopped while connecting: send nothing
                    return
                self._conn = conn
            prefix = url.path.rstrip("/")
            conn.request("POST", prefix + self.path, body=self.body, headers=self.headers)
            resp = conn.getresponse()
            if resp.status != 200:
                self._fail(f"{resp.status}: {_error_message(resp.read(), resp.reason)}")
                return
            for raw in resp:  # one SSE line at a time, as the server flushes them
                self.events.put(("line", raw.decode("utf-8")))
            self.events.put(("end", ""))
        except (OSError, http.client.HTTPException) as exc:
            self._fail(f"the connection to {self.base} broke: {exc}")
        finally:
            conn.close()

    def _fail(self, message: str) -> None:
        if not self._cancelled:
            self.events.put(("error", message))


class OfflineBackend:
    """Runs the engine in this process (``minisgl_core.api.LLM``) and streams its text."""

    def __init__(self, model: str | None, params: Params) -> None:
        from minisgl_core.api import LLM, SamplingParams

        self.llm = LLM(model)
        self.model = model or "default"
        self.sampling = SamplingParams(**{k: v for k, v in vars(params).items()
                                          if v is not None})
        self.outcome = Outcome()

    def describe(self) -> str:
        """One line for the banner."""
        return f"{self.model} (offline, in this process)"

    def stream(self, messages: Sequence[Message],
               stopped: Callable[[], bool] = lambda: False) -> Iterator[str]:
        """Yield the answer's text step by step; ``stopped()`` or closing early aborts it."""
        self.outcome = outcome = Outcome()
        chunks = self.llm.stream_chat(messages, self.sampling)
        try:
            for chunk in chunks:
                if stopped():  # checked between steps: a step itself runs to its end
                    return
                if chunk.text:
                    yield chunk.text
                if chunk.finish_reason is not None:
                    outcome.finish_reason = chunk.finish_reason
                    outcome.completion_tokens = chunk.completion_tokens
        finally:
            chunks.close()  # aborts the request when it has not finished


def _error_message(body: bytes, reason: str) -> str:
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return str(reason)
