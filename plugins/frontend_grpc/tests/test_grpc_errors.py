"""Every status code the gRPC frontend returns, each produced by a real bad request."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from minisgl_frontend_grpc.codegen import load_stubs

from minisgl_core.api import LaunchConfig

pb2, pb2_grpc = load_stubs()
Code = grpc.StatusCode


def _req(**fields: Any) -> Any:
    sampling = fields.pop("sampling", {})
    return pb2.GenerateRequest(sampling=pb2.SamplingParams(**sampling), **fields)


CASES = [
    ("no input", _req(), Code.INVALID_ARGUMENT, "exactly one of prompt, messages or token_ids"),
    ("two inputs", _req(prompt="a", token_ids=[1]), Code.INVALID_ARGUMENT, "prompt and token_ids"),
    ("three inputs", _req(prompt="a", token_ids=[1], messages=[pb2.ChatMessage(role="user")]),
     Code.INVALID_ARGUMENT, "prompt and messages and token_ids"),
    ("empty role", _req(messages=[pb2.ChatMessage(content="x")]), Code.INVALID_ARGUMENT,
     "messages[0].role"),
    ("negative id", _req(token_ids=[3, -1]), Code.INVALID_ARGUMENT, "non-negative"),
    ("temperature", _req(prompt="a", sampling={"temperature": -0.5}), Code.INVALID_ARGUMENT,
     "temperature must be >= 0"),
    ("top_p", _req(prompt="a", sampling={"top_p": 0.0}), Code.INVALID_ARGUMENT, "top_p"),
    ("top_k", _req(prompt="a", sampling={"top_k": -2}), Code.INVALID_ARGUMENT, "top_k"),
    ("max_tokens", _req(prompt="a", sampling={"max_tokens": -3}), Code.INVALID_ARGUMENT,
     "max_tokens must be at least 1"),
    ("nan", _req(prompt="a", sampling={"min_p": float("nan")}), Code.INVALID_ARGUMENT,
     "min_p must be a finite number"),
    ("empty stop", _req(prompt="a", sampling={"stop": [""]}), Code.INVALID_ARGUMENT, "stop"),
    ("penalty", _req(prompt="a", sampling={"presence_penalty": 3.0}), Code.INVALID_ARGUMENT,
     "presence_penalty"),
    ("logit_bias id", _req(prompt="a", sampling={"logit_bias": {-4: 1.0}}),
     Code.INVALID_ARGUMENT, "logit_bias token ids must be non-negative"),
    ("logit_bias value", _req(prompt="a", sampling={"logit_bias": {4: 150.0}}),
     Code.INVALID_ARGUMENT, "logit_bias values must be numbers in [-100, 100]"),
    ("min_tokens", _req(prompt="a", sampling={"max_tokens": 4, "min_tokens": 5}),
     Code.INVALID_ARGUMENT, "min_tokens (5) must not exceed max_tokens (4)"),
    ("too long", _req(prompt="one two three four five six seven eight nine"),
     Code.INVALID_ARGUMENT, "the prompt has 9 tokens; the context is 8"),
    ("too long ids", _req(token_ids=list(range(20))), Code.INVALID_ARGUMENT, "context is 8"),
    ("unknown model", _req(model="gpt-9", prompt="a"), Code.NOT_FOUND,
     "model 'gpt-9' is not served here; this server serves 'scripted-model'"),
    ("engine error", _req(prompt="fail"), Code.INTERNAL, "CUDA out of memory"),
]


@pytest.mark.parametrize(("request_msg", "code", "detail"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_request_status(run_server, engine, request_msg: Any, code: Code,
                            detail: str) -> None:
    async def scenario(frontend, channel, engine) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in pb2_grpc.GeneratorStub(channel).Generate(request_msg):
                pass
        assert err.value.code() == code
        assert detail in err.value.details()
        assert engine.aborted == []  # refused or finished by the engine: nothing to abort

    run_server(scenario)


def test_engine_down_is_unavailable(run_server, engine) -> None:
    engine.up = False

    async def scenario(frontend, channel, engine) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in pb2_grpc.GeneratorStub(channel).Generate(_req(prompt="a")):
                pass
        assert err.value.code() == Code.UNAVAILABLE
        assert "the engine is starting" in err.value.details()

    run_server(scenario)


def test_queue_full_is_resource_exhausted(run_server, engine) -> None:
    engine.overloaded = True

    async def scenario(frontend, channel, engine) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in pb2_grpc.GeneratorStub(channel).Generate(_req(prompt="a")):
                pass
        assert err.value.code() == Code.RESOURCE_EXHAUSTED
        assert "waiting queue is full" in err.value.details()

    run_server(scenario)


def test_second_server_on_the_same_port_fails(run_server, engine) -> None:
    from minisgl_frontend_grpc.server import GrpcFrontend

    async def scenario(frontend, channel, engine) -> None:
        second = GrpcFrontend(engine, LaunchConfig(), {"port": frontend.bound_port})
        with pytest.raises(RuntimeError, match="cannot bind"):
            await second.start()

    run_server(scenario)


def test_sampling_fields_reach_the_core() -> None:
    from minisgl_frontend_grpc.convert import to_sampling

    sp = to_sampling(pb2.SamplingParams(max_tokens=9, min_tokens=3,
                                        logit_bias={7: -100.0, 2: 2.5}))
    assert (sp.max_tokens, sp.min_tokens, sp.logit_bias) == (9, 3, ((2, 2.5), (7, -100.0)))
    assert to_sampling(pb2.SamplingParams()).logit_bias == ()
