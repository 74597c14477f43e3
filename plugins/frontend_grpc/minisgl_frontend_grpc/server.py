"""GrpcFrontend: the minisgl.v1.Generator service on grpc.aio, with health and reflection."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from minisgl_core.api import (
    EngineClient,
    EngineOverloaded,
    EngineUnavailable,
    RequestRejected,
    TextDelta,
    check_port,
    checked_options,
)
from minisgl_frontend_grpc.codegen import load_stubs
from minisgl_frontend_grpc.convert import status_for_error, to_core_request
from minisgl_frontend_grpc.tool_answer import ToolAnswer

if TYPE_CHECKING:
    from minisgl_core.api import LaunchConfig

pb2, pb2_grpc = load_stubs()

log = logging.getLogger("minisgl.frontend.grpc")

SERVICE_NAME: str = pb2.DESCRIPTOR.services_by_name["Generator"].full_name  # minisgl.v1.Generator
# the [frontends.grpc] table: every option and its default (--grpc-port writes port, --host
# and --api-key write host and api_key)
OPTIONS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 50051,  # 0: any free port (see GrpcFrontend.bound_port)
    "api_key": None,  # set: every call carries ``authorization: Bearer <key>``
    "grace_s": 5.0,  # how long shutdown lets in-flight calls finish
    "health_interval_s": 0.5,  # how often the health status follows client.healthy()
}
SERVER_OPTIONS = (
    # grpc turns SO_REUSEPORT on by default: a second server would bind the same port silently
    ("grpc.so_reuseport", 0),
    # tolerate client keepalive pings during long generations
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
)


class GeneratorServicer(pb2_grpc.GeneratorServicer):  # type: ignore[misc,name-defined]
    """Generate and ListModels over an EngineClient."""

    def __init__(self, client: EngineClient, api_key: str | None = None) -> None:
        self._client = client
        self._expected = f"Bearer {api_key}".encode() if api_key else None

    async def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        """With an API key set, every call carries ``authorization: Bearer <key>`` metadata."""
        if self._expected is None:
            return
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        if not hmac.compare_digest(str(given).encode(), self._expected):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "missing or wrong API key (authorization: Bearer <key>)")

    async def ListModels(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The one served model."""
        await self._authorize(context)
        model = pb2.Model(id=self._client.model_name, max_context=self._client.max_context)
        return pb2.ListModelsResponse(models=[model])

    async def Generate(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        """Stream one GenerateResponse per TextDelta; errors end the call with a status code.

        With tools, only the answer's plain content streams as text; its calls go on the final
        message. A client cancel or deadline reaches this coroutine only as CancelledError (and
        ``context.cancelled()`` is unreliable), so the engine stream is closed in ``finally``:
        closing it early aborts the request in the scheduler.
        """
        await self._authorize(context)
        try:
            core, tools = to_core_request(request, model_name=self._client.model_name,
                                          owner=self._client.frontend_id)
        except RequestRejected as exc:  # every check's rejection, mapped as the engine's are
            await context.abort(status_for_error(exc.info()), exc.message)
            return  # not reached: abort raises
        rid = core.request_id
        answer = ToolAnswer(tools) if tools is not None and tools.mode != "none" else None
        stream = self._client.generate(core)
        finished = False
        try:
            async for delta in stream:
                if delta.finish_reason is not None:
                    finished = True
                    await self._finish(rid, delta, answer, context)
                    return
                text = delta.text if answer is None else answer.content(
                    delta.text, last=False, family=delta.tool_parser)
                if text or delta.reasoning or delta.token_ids or delta.prompt_logprobs:
                    await context.write(pb2.GenerateResponse(
                        request_id=rid, text=text, token_ids=delta.token_ids,
                        logprobs=_logprobs(delta), prompt_logprobs=_prompt_logprobs(delta),
                        reasoning_content=delta.reasoning))
            finished = True  # the engine ended the stream without a terminal delta: a bug
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"request {rid}: the engine stream ended without a finish reason")
        except EngineUnavailable as exc:
            finished = True
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc) or "engine unavailable")
        except EngineOverloaded as exc:
            finished = True
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc) or "overloaded")
        except ValueError as exc:  # e.g. a request id that is already in flight
            finished = True
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            await _close(stream, self._client, rid, aborted=not finished)

    async def _finish(self, rid: str, delta: TextDelta, answer: ToolAnswer | None,
                      context: grpc.aio.ServicerContext) -> None:
        if delta.error is not None:
            await context.abort(status_for_error(delta.error), delta.error.message)
        if delta.finish_reason not in ("stop", "length"):  # "abort" / "error" without details
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"request {rid} was ended by the engine ({delta.finish_reason})")
        text, reason = delta.text, str(delta.finish_reason)
        calls: list[Any] = []
        if answer is not None:
            text = answer.content(delta.text, last=True, family=delta.tool_parser)
            reason = answer.finish_reason(reason)
            calls = [pb2.ToolCall(id=c.id, name=c.name, arguments=c.arguments)
                     for c in answer.calls()]
        usage = pb2.Usage(prompt_tokens=delta.prompt_tokens,
                          completion_tokens=delta.completion_tokens)
        await context.write(pb2.GenerateResponse(
            request_id=rid, text=text, token_ids=delta.token_ids, finish_reason=reason,
            usage=usage, logprobs=_logprobs(delta), prompt_logprobs=_prompt_logprobs(delta),
            tool_calls=calls, reasoning_content=delta.reasoning))


def _logprobs(delta: TextDelta) -> list[Any]:
    """The delta's logprobs as TokenLogprob messages (none unless the request asked)."""
    return [pb2.TokenLogprob(token_id=e.token_id, token=e.token, logprob=e.logprob,
                             top=[pb2.TopLogprob(token=t, logprob=v) for t, v in e.top])
            for e in delta.logprobs]


async def _close(stream: AsyncIterator[TextDelta], client: EngineClient, rid: str, *,
                 aborted: bool) -> None:
    """Close the engine stream; if it cannot be closed, abort the request explicitly."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
    elif aborted:
        await client.abort(rid)


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with their defaults; ValueError naming the bad one (``minisgl launch`` calls
    this before any worker starts)."""
    checked = checked_options("[frontends.grpc]", options, OPTIONS)
    check_port("[frontends.grpc]", checked["port"])
    if not checked["host"]:
        raise ValueError("[frontends.grpc] host must not be empty")
    for key in ("grace_s", "health_interval_s"):
        if not checked[key] > 0:
            raise ValueError(f"[frontends.grpc] {key} must be > 0, got {checked[key]}")
    return checked


class GrpcFrontend:
    """The gRPC frontend: ``serve()`` until ``shutdown()``, on its ``host``:``port`` options
    (127.0.0.1:50051 by default; port 0 picks a free one, see ``bound_port``). ``OPTIONS`` lists
    its ``[frontends.grpc]`` table."""

    check_options = staticmethod(check_options)

    def __init__(self, client: EngineClient, config: LaunchConfig,
                 options: Mapping[str, Any]) -> None:
        self._client = client
        checked = check_options(options)
        self.host: str = checked["host"]
        self.port: int = checked["port"]
        self.api_key: str | None = checked["api_key"] or None
        self.grace_s: float = checked["grace_s"]
        self.health_interval_s: float = checked["health_interval_s"]
        self.bound_port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._health_task: asyncio.Task[None] | None = None
        self._serving: bool | None = None

    @property
    def address(self) -> str:
        """``host:port`` as a client dials it (the bound port once started)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port if self.bound_port is None else self.bound_port}"

    async def start(self) -> None:
        """Bind and start the server; raises RuntimeError when the port is taken."""
        server = grpc.aio.server(options=SERVER_OPTIONS)
        pb2_grpc.add_GeneratorServicer_to_server(GeneratorServicer(self._client, self.api_key),
                                                 server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        try:
            self.bound_port = server.add_insecure_port(self.address)
        except RuntimeError as exc:
            raise RuntimeError(f"gRPC frontend cannot bind {self.address}: {exc}") from exc
        await server.start()
        self._server = server
        await self._update_health()
        self._health_task = asyncio.get_running_loop().create_task(self._follow_health())
        log.info("gRPC frontend listening on %s", self.address)

    async def serve(self) -> None:
        """Start (if not yet started) and serve until ``shutdown``."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        try:
            await self._server.wait_for_termination()
        finally:
            await self._stop_health_task()

    async def shutdown(self) -> None:
        """Report NOT_SERVING, let in-flight calls finish for ``grace_s``, then stop."""
        await self._health.enter_graceful_shutdown()
        await self._stop_health_task()
        if self._server is not None:
            await self._server.stop(self.grace_s)

    async def _update_health(self) -> None:
        serving = self._client.healthy()
        if serving == self._serving:
            return
        self._serving = serving
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", SERVICE_NAME):  # "" is the server as a whole
            await self._health.set(name, status)

    async def _follow_health(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await self._update_health()

    async def _stop_health_task(self) -> None:
        task, self._health_task = self._health_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _prompt_logprobs(delta: TextDelta) -> list[Any]:
    """The prompt's entries as TokenLogprob messages, from its second token on (or none)."""
    p = delta.prompt_logprobs
    if p is None:
        return []
    pairs = zip(p.logprobs.token_ids[1:], p.tokens[1:], p.logprobs.entries, p.top_tokens,
                strict=True)
    return [pb2.TokenLogprob(token_id=tok, token=text, logprob=e.logprob,
                             top=[pb2.TopLogprob(token=t, logprob=v)
                                  for t, (_, v) in zip(tops, e.top, strict=True)])
            for tok, text, e, tops in pairs]
