"""grpc.health.v1 health checking and server reflection, queried by real clients."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

SERVICE = "minisgl.v1.Generator"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def _status(stub, service: str) -> int:
    return (await stub.Check(health_pb2.HealthCheckRequest(service=service))).status


def test_health_follows_the_engine(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = health_pb2_grpc.HealthStub(channel)
        assert await _status(stub, "") == SERVING
        assert await _status(stub, SERVICE) == SERVING
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _status(stub, "no.such.Service")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND

        engine.up = False
        statuses = []
        for _ in range(300):  # bounded: the health task polls every 20 ms here
            statuses = [await _status(stub, ""), await _status(stub, SERVICE)]
            if statuses == [NOT_SERVING, NOT_SERVING]:
                break
            await asyncio.sleep(0.01)
        assert statuses == [NOT_SERVING, NOT_SERVING]

        engine.up = True
        for _ in range(300):
            if await _status(stub, SERVICE) == SERVING:
                break
            await asyncio.sleep(0.01)
        assert await _status(stub, SERVICE) == SERVING

    run_server(scenario, health_interval_s=0.02)


def test_health_watchers_see_not_serving_when_shutdown_starts(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=SERVICE))
        assert (await watch.read()).status == SERVING
        stopping = asyncio.create_task(frontend.shutdown())
        assert (await watch.read()).status == NOT_SERVING  # sent before the server stops
        await stopping

    run_server(scenario)


def test_reflection_lists_services_and_serves_the_proto(run_server, engine) -> None:
    async def scenario(frontend, channel, engine) -> None:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [reflection_pb2.ServerReflectionRequest(list_services=""),
                    reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE)]
        replies = [r async for r in stub.ServerReflectionInfo(iter(requests))]
        names = {s.name for s in replies[0].list_services_response.service}
        assert {SERVICE, "grpc.health.v1.Health",
                "grpc.reflection.v1alpha.ServerReflection"} <= names
        raw = replies[1].file_descriptor_response.file_descriptor_proto[0]
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
        assert proto.name == "minisgl/v1/generate.proto" and proto.package == "minisgl.v1"
        assert [m.name for m in proto.service[0].method] == ["Generate", "ListModels"]
        assert proto.service[0].method[0].server_streaming

    run_server(scenario)
