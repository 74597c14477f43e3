"""A scripted EngineClient (a stand-in for the engine) and a helper to run a real gRPC server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from minisgl_core.api import (
    EngineOverloaded,
    EngineUnavailable,
    ErrorInfo,
    GenerateRequest,
    LaunchConfig,
    TextDelta,
)

SCENARIO_TIMEOUT_S = 30.0


class ScriptedEngine:
    """Implements the EngineClient protocol with deterministic output and records aborts.

    The reply to a request is ``max_tokens`` pieces ``"w0 ", "w1 " ...`` (ids 100, 101 ...), with
    an empty delta and an id-only delta (a partial UTF-8 character) mixed in. A prompt containing
    "hang" yields one piece and then waits forever; "fail" ends with a server error; a prompt of
    more than ``max_context`` words ends with context_length_exceeded, as the real tokenizer does.
    """

    model_name = "scripted-model"
    max_context = 8
    frontend_id = "frontend.grpc.test"

    def __init__(self) -> None:
        self.up = True
        self.overloaded = False
        self.requests: list[GenerateRequest] = []
        self.aborted: list[str] = []
        self.completed: list[str] = []

    @staticmethod
    def expected_text(max_tokens: int) -> str:
        """The text produced for a normal request."""
        return " ".join(f"w{i}" for i in range(max_tokens))

    async def wait_for_abort(self, request_id: str, timeout_s: float = 5.0) -> bool:
        """Poll (bounded) until ``request_id`` was aborted."""
        for _ in range(int(timeout_s / 0.01)):
            if request_id in self.aborted:
                return True
            await asyncio.sleep(0.01)
        return request_id in self.aborted

    def healthy(self) -> bool:
        return self.up

    def metrics(self) -> dict[str, float]:
        return {}

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        if not self.up:
            raise EngineUnavailable("the engine is starting")
        if self.overloaded:
            raise EngineOverloaded("the waiting queue is full (2 requests); retry later")
        self.requests.append(request)
        rid = request.request_id
        prompt_len = _prompt_len(request)
        finished = False
        try:
            if prompt_len > self.max_context:
                finished = True
                yield TextDelta(rid, finish_reason="error", error=ErrorInfo(
                    f"the prompt has {prompt_len} tokens; the context is {self.max_context}",
                    code="context_length_exceeded"))
                return
            prompt = request.prompt or ""
            if "fail" in prompt:
                finished = True
                yield TextDelta(rid, "w0 ", (100,))
                yield TextDelta(rid, finish_reason="error", error=ErrorInfo(
                    "CUDA out of memory", type="server_error", code="internal_error"))
                return
            n = request.sampling.max_tokens or 16
            yield TextDelta(rid, "w0 ", (100,))
            if "hang" in prompt:
                await asyncio.Event().wait()  # ended only by the caller closing this stream
            yield TextDelta(rid)  # nothing new: must not reach the client
            yield TextDelta(rid, "", (250,))  # ids without text yet: must reach the client
            for i in range(1, n - 1):
                yield TextDelta(rid, f"w{i} ", (100 + i,))
            finished = True
            self.completed.append(rid)
            yield TextDelta(rid, f"w{n - 1}", (100 + n - 1,), finish_reason="length",
                            prompt_tokens=prompt_len, completion_tokens=n)
        finally:
            if not finished:
                self.aborted.append(rid)


def _prompt_len(request: GenerateRequest) -> int:
    if request.token_ids is not None:
        return len(request.token_ids)
    if request.messages is not None:
        return sum(len(m.content.split()) for m in request.messages)
    return len((request.prompt or "").split())


Scenario = Callable[[Any, grpc.aio.Channel, ScriptedEngine], Awaitable[None]]


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
def run_server(engine: ScriptedEngine) -> Callable[..., None]:
    """``run_server(scenario, **options)``: start a GrpcFrontend, run the scenario, shut down."""
    from minisgl_frontend_grpc.server import GrpcFrontend

    def run(scenario: Scenario, **options: Any) -> None:
        async def main() -> None:
            frontend = GrpcFrontend(engine, LaunchConfig(), {"port": 0, "grace_s": 0.5, **options})
            serving = asyncio.create_task(frontend.serve())
            try:
                for _ in range(500):  # bounded wait for the bind
                    if frontend.bound_port is not None or serving.done():
                        break
                    await asyncio.sleep(0.01)
                if serving.done():
                    serving.result()  # raise the startup error
                async with grpc.aio.insecure_channel(frontend.address) as channel:
                    await scenario(frontend, channel, engine)
            finally:
                await frontend.shutdown()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(serving, 10)

        asyncio.run(asyncio.wait_for(main(), SCENARIO_TIMEOUT_S))

    return run
