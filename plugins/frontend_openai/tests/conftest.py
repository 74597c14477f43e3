"""Fixtures for the OpenAI frontend tests: a scripted EngineClient double and live servers.

``ScriptedEngineClient`` stands in for the engine only in these HTTP-layer tests: it implements
the EngineClient protocol, produces deterministic deltas, and records every submission and every
abort (a stream closed before its final delta). Behaviour is chosen per request by markers in the
prompt text, e.g. ``[slow]`` or ``[error-after=3]``, so tests can share one server.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from minisgl_frontend_openai.server import OpenAIFrontend

from minisgl_core.api import (
    EngineOverloaded,
    EngineUnavailable,
    ErrorInfo,
    GenerateRequest,
    LaunchConfig,
    TextDelta,
    TextLogprob,
    TokenizerReply,
)

WORDS = (" alpha", " beta", " gamma", " delta", " epsilon", " zeta")
UNICODE = ("h\u00e9", " \U0001f600", " \u4e2d", "\u6587", " \u00fc", "!")
NATURAL_LENGTH = 12  # tokens before the double "samples" EOS (unless ignore_eos)
VOCAB_SIZE = 1000


class ScriptedEngineClient:
    """EngineClient test double: one token per delta, the last delta carries finish_reason.

    Prompt markers: ``[slow]`` 20 ms per token; ``[first-delay=S]`` S seconds before the first
    delta; ``[error-after=K]`` an error delta after K tokens; ``[abort]`` the engine ends the
    request with ``abort``; ``[unicode]`` multi-byte text; ``[cached]`` half the prompt cached.
    """

    def __init__(self) -> None:
        self.model_name = "scripted-model"
        self.max_context = 256
        self.frontend_id = "openai-test"
        self.is_healthy = True
        self.reject: Exception | None = None  # raised by generate() before any delta
        self.gauges = {"requests_running": 2.0, "requests_waiting": 1.0,
                       "kv_pages_total": 64.0, "kv_pages_free": 60.0, "steps_total": 7.0}
        self.requests: list[GenerateRequest] = []
        self.tokenized: list[GenerateRequest] = []
        self.aborted: list[str] = []
        self.explicit_aborts: list[str] = []
        self.active: set[str] = set()

    # ---- EngineClient protocol ----------------------------------------------------------------

    def healthy(self) -> bool:
        return self.is_healthy

    def metrics(self) -> dict[str, float]:
        return dict(self.gauges)

    async def abort(self, request_id: str) -> None:
        self.explicit_aborts.append(request_id)

    async def tokenize(self, request: GenerateRequest, *, add_special_tokens: bool | None = None,
                       add_generation_prompt: bool = True, token_strs: bool = False
                       ) -> TokenizerReply:
        """One id per word of the scripted prompt (its length, as generation counts it)."""
        if not self.is_healthy:
            raise EngineUnavailable("the engine is starting")
        self.tokenized.append(request)
        words = prompt_text(request).split()
        ids = tuple(len(w) for w in words)
        if add_special_tokens if add_special_tokens is not None else request.prompt is not None:
            ids, words = (0, *ids), ["<s>", *words]
        return TokenizerReply("scripted", token_ids=ids,
                              token_strs=tuple(words) if token_strs else None)

    async def detokenize(self, token_ids: Sequence[int]) -> TokenizerReply:
        if any(t >= VOCAB_SIZE for t in token_ids):
            return TokenizerReply("scripted", error=ErrorInfo(
                f"token ids must be below the vocabulary size ({VOCAB_SIZE})", param="tokens"))
        return TokenizerReply("scripted", text=" ".join(f"t{t}" for t in token_ids))

    def plugins(self) -> list[dict[str, Any]]:
        return [{"name": "frontend_openai", "dist": "minisgl-frontend-openai",
                 "version": "0.1.0", "provides": ["frontend:openai"], "hooks": [],
                 "status": "ok"}]

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        self.requests.append(request)
        if self.reject is not None:
            raise self.reject
        rid = request.request_id
        self.active.add(rid)
        finished = False
        try:
            for delta in self._script(request):
                await asyncio.sleep(delta[0])
                finished = delta[1].finish_reason is not None
                yield delta[1]
        finally:
            self.active.discard(rid)
            if not finished:
                self.aborted.append(rid)

    # ---- the script ---------------------------------------------------------------------------

    def _script(self, request: GenerateRequest) -> Iterator[tuple[float, TextDelta]]:
        text = prompt_text(request)
        prompt_tokens = prompt_length(request)
        rid, sp = request.request_id, request.sampling
        base = {"request_id": rid, "prompt_tokens": prompt_tokens,
                "cached_tokens": prompt_tokens // 2 if "[cached]" in text else 0}
        first = float(m.group(1)) if (m := re.search(r"\[first-delay=([\d.]+)\]", text)) else 0.0
        if request.token_ids is not None and any(t >= VOCAB_SIZE for t in request.token_ids):
            yield first, TextDelta(**base, finish_reason="error", error=ErrorInfo(
                f"token id out of range (vocabulary size {VOCAB_SIZE})", param="prompt"))
            return
        wanted = sp.max_tokens or 0
        if prompt_tokens + wanted > self.max_context:
            yield first, TextDelta(**base, finish_reason="error", error=ErrorInfo(
                f"This model's maximum context length is {self.max_context} tokens, but the "
                f"request asks for {prompt_tokens} prompt tokens and {wanted} completion tokens",
                code="context_length_exceeded", param="prompt"))
            return
        budget = sp.max_tokens if sp.max_tokens is not None else self.max_context - prompt_tokens
        pieces = UNICODE if "[unicode]" in text else WORDS
        count = budget if sp.ignore_eos else min(budget, NATURAL_LENGTH)
        reason = "length" if count == budget else "stop"
        outputs = [pieces[i % len(pieces)] for i in range(count)]
        outputs, reason = _apply_stop(outputs, sp.stop, reason)
        error_after = int(m.group(1)) if (m := re.search(r"\[error-after=(\d+)\]", text)) else None
        delay = 0.02 if "[slow]" in text else 0.0
        for i, piece in enumerate(outputs):
            wait = first if i == 0 else delay
            if error_after is not None and i == error_after:
                yield wait, TextDelta(**base, completion_tokens=i, finish_reason="error",
                                      error=ErrorInfo("scripted failure", type="server_error",
                                                      code="scripted"))
                return
            last = i == len(outputs) - 1
            end = ("abort" if "[abort]" in text else reason) if last else None
            logprobs = () if sp.logprobs is None else (TextLogprob(i, piece, -0.5 * i, tuple(
                (f"alt{k}", -1.0 - k) for k in range(sp.logprobs))),)
            yield wait, TextDelta(**base, text=piece, token_ids=(i,), completion_tokens=i + 1,
                                  finish_reason=end, logprobs=logprobs)
        if not outputs:
            yield first, TextDelta(**base, finish_reason=reason)

    def expected_text(self, count: int = NATURAL_LENGTH, *, unicode: bool = False) -> str:
        pieces = UNICODE if unicode else WORDS
        return "".join(pieces[i % len(pieces)] for i in range(count))

    def requests_with(self, marker: str) -> list[GenerateRequest]:
        return [r for r in self.requests if marker in prompt_text(r)]


def _apply_stop(outputs: list[str], stop: tuple[str, ...], reason: str) -> tuple[list[str], str]:
    text = "".join(outputs)
    cuts = [i for s in stop if (i := text.find(s)) >= 0]
    if not cuts:
        return outputs, reason
    keep, out = min(cuts), []
    for piece in outputs:
        if keep <= 0:
            break
        out.append(piece[:keep])
        keep -= len(piece)
    return out, "stop"


def prompt_text(request: GenerateRequest) -> str:
    if request.prompt is not None:
        return request.prompt
    if request.messages is not None:
        return "\n".join(m.content for m in request.messages)
    return " ".join(f"t{t}" for t in request.token_ids or ())


def prompt_length(request: GenerateRequest) -> int:
    if request.token_ids is not None:
        return len(request.token_ids)
    if request.messages is not None:
        return sum(len(m.content.split()) + 3 for m in request.messages)
    return len((request.prompt or "").split())


class RunningServer:
    """An OpenAIFrontend served by uvicorn on its own event loop in a background thread."""

    def __init__(self, client: ScriptedEngineClient, *, api_key: str | None = None,
                 options: dict[str, Any] | None = None, **config_fields: Any) -> None:
        config = LaunchConfig(**config_fields)
        self.frontend = OpenAIFrontend(client, config, {"host": "127.0.0.1", "port": 0,
                                                        "api_key": api_key, **(options or {})})
        self.port = self.frontend.bind()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.serving = asyncio.run_coroutine_threadsafe(self.frontend.serve(), self.loop)
        asyncio.run_coroutine_threadsafe(self.frontend.wait_started(), self.loop).result(10)

    def call(self, coro: Any, timeout: float = 10) -> Any:
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.call(self.frontend.shutdown(), 15)
        self.serving.result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds passed (bounded loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


MAX_BODY_BYTES = 64 * 1024


@pytest.fixture(scope="session")
def engine() -> ScriptedEngineClient:
    return ScriptedEngineClient()


@pytest.fixture(scope="session")
def server(engine: ScriptedEngineClient) -> Iterator[RunningServer]:
    running = RunningServer(engine, options={"max_body_bytes": MAX_BODY_BYTES,
                                             "model_aliases": ["scripted-alias"]})
    yield running
    running.stop()


@pytest.fixture(scope="session")
def keyed_engine() -> ScriptedEngineClient:
    return ScriptedEngineClient()


@pytest.fixture(scope="session")
def keyed_server(keyed_engine: ScriptedEngineClient) -> Iterator[RunningServer]:
    running = RunningServer(keyed_engine, api_key="sk-test-key")
    yield running
    running.stop()


@pytest.fixture
def engine_state(engine: ScriptedEngineClient) -> Iterator[ScriptedEngineClient]:
    """The shared double, with its health and rejection switches restored afterwards."""
    yield engine
    engine.is_healthy = True
    engine.reject = None


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    """One shared HTTP client (building a client per call costs ~0.1 s of TLS setup)."""
    with httpx.Client(timeout=10) as client:
        yield client


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """Helpers for test modules (which cannot import this conftest by name)."""
    return SimpleNamespace(wait_for=wait_for, prompt_text=prompt_text, RunningServer=RunningServer,
                           ScriptedEngineClient=ScriptedEngineClient, overloaded=EngineOverloaded,
                           unavailable=EngineUnavailable, max_body_bytes=MAX_BODY_BYTES)
