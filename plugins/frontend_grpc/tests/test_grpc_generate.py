"""Generate and ListModels over a real grpc.aio server and client: streaming, cancel, deadline."""

from __future__ import annotations

import asyncio
import re

import grpc
import pytest
from minisgl_frontend_grpc.codegen import load_stubs

pb2, pb2_grpc = load_stubs()


def test_stream_one_message_per_delta_then_finish_and_usage(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = pb2_grpc.GeneratorStub(channel)
        request = pb2.GenerateRequest(prompt="tell me a story",
                                      sampling=pb2.SamplingParams(max_tokens=5))
        replies = [r async for r in stub.Generate(request)]
        # w0 | ids-only delta | w1 w2 w3 | final w4; the empty delta is skipped
        assert [r.text for r in replies] == ["w0 ", "", "w1 ", "w2 ", "w3 ", "w4"]
        assert [list(r.token_ids) for r in replies] == [[100], [250], [101], [102], [103], [104]]
        assert "".join(r.text for r in replies) == engine.expected_text(5)
        assert [r.finish_reason for r in replies] == [""] * 5 + ["length"]
        assert not any(r.HasField("usage") for r in replies[:-1])
        assert (replies[-1].usage.prompt_tokens, replies[-1].usage.completion_tokens) == (4, 5)
        rid = replies[0].request_id
        assert re.fullmatch(r"[0-9a-f]{32}", rid) and {r.request_id for r in replies} == {rid}
        assert engine.completed == [rid] and engine.aborted == []

    run_server(scenario)


def test_request_fields_reach_the_engine(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = pb2_grpc.GeneratorStub(channel)
        sampling = pb2.SamplingParams(max_tokens=3, temperature=0.0, top_k=5, stop=["\n"],
                                      seed=7, ignore_eos=True, repetition_penalty=1.1)
        chat = pb2.GenerateRequest(
            model="scripted-model", request_id="my-id", sampling=sampling,
            messages=[pb2.ChatMessage(role="system", content="be brief"),
                      pb2.ChatMessage(role="user", content="hi")])
        replies = [r async for r in stub.Generate(chat)]
        assert {r.request_id for r in replies} == {"my-id"}
        ids = pb2.GenerateRequest(token_ids=[1, 2, 3])  # no sampling at all: every default
        assert [r async for r in stub.Generate(ids)][-1].finish_reason == "length"

        first, second = engine.requests
        assert first.request_id == "my-id" and first.owner == engine.frontend_id
        assert [(m.role, m.content) for m in first.messages] == [("system", "be brief"),
                                                                 ("user", "hi")]
        assert first.prompt is None and first.token_ids is None
        s = first.sampling
        # temperature 0.0 was set explicitly, so it is kept (not taken as "unset")
        assert (s.max_tokens, s.temperature, s.top_k, s.stop, s.seed, s.ignore_eos) == (
            3, 0.0, 5, ("\n",), 7, True)
        assert s.repetition_penalty == pytest.approx(1.1)
        assert second.token_ids == (1, 2, 3) and second.messages is None
        d = second.sampling
        assert (d.max_tokens, d.temperature, d.top_p, d.top_k, d.seed) == (16, 1.0, 1.0, 0, None)

    run_server(scenario)


def test_client_cancel_aborts_the_request(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = pb2_grpc.GeneratorStub(channel)
        call = stub.Generate(pb2.GenerateRequest(prompt="hang please", request_id="c1"))
        first = await call.read()
        assert first.text == "w0 "
        assert engine.aborted == []
        call.cancel()
        assert await engine.wait_for_abort("c1")
        assert call.cancelled() and await call.code() == grpc.StatusCode.CANCELLED
        assert engine.completed == []

    run_server(scenario)


def test_deadline_aborts_the_request(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = pb2_grpc.GeneratorStub(channel)
        call = stub.Generate(pb2.GenerateRequest(prompt="hang", request_id="d1"), timeout=0.3)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call:
                pass
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert await engine.wait_for_abort("d1")

    run_server(scenario)


def test_concurrent_streams_are_independent(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = pb2_grpc.GeneratorStub(channel)

        async def one(i: int) -> str:
            request = pb2.GenerateRequest(prompt=f"p{i}",
                                          sampling=pb2.SamplingParams(max_tokens=3 + i))
            return "".join([r.text async for r in stub.Generate(request)])

        texts = await asyncio.gather(*(one(i) for i in range(6)))
        assert texts == [engine.expected_text(3 + i) for i in range(6)]
        assert len(set(engine.completed)) == 6 and engine.aborted == []

    run_server(scenario)


def test_shutdown_ends_in_flight_calls_and_aborts_them(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = pb2_grpc.GeneratorStub(channel)
        call = stub.Generate(pb2.GenerateRequest(prompt="hang", request_id="s1"))
        assert (await call.read()).text == "w0 "
        await frontend.shutdown()  # grace 0.5 s, then in-flight calls are cancelled
        assert await engine.wait_for_abort("s1")
        assert await call.code() != grpc.StatusCode.OK

    run_server(scenario)


def test_list_models(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        reply = await pb2_grpc.GeneratorStub(channel).ListModels(pb2.ListModelsRequest())
        assert [(m.id, m.max_context) for m in reply.models] == [("scripted-model", 8)]

    run_server(scenario)
