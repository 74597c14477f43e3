"""A small blocking client for the minisgl.v1.Generator service (`minisgl grpc-generate`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from minisgl_frontend_grpc.codegen import load_stubs

pb2, pb2_grpc = load_stubs()


def build_request(prompt: str, *, max_tokens: int = 64, temperature: float | None = None,
                  model: str = "", request_id: str = "") -> Any:
    """A ``minisgl.v1.GenerateRequest`` for a plain-text prompt."""
    sampling = pb2.SamplingParams(max_tokens=max_tokens)
    if temperature is not None:
        sampling.temperature = temperature
    return pb2.GenerateRequest(model=model, prompt=prompt, sampling=sampling,
                               request_id=request_id)


def stream_generate(url: str, request: Any, *, timeout: float | None = None) -> Iterator[Any]:
    """Yield the GenerateResponses of one call; raises grpc.RpcError with the server's status.

    Leaving the loop early (break, Ctrl-C) cancels the call, which aborts the request.
    """
    with grpc.insecure_channel(url) as channel:
        call = pb2_grpc.GeneratorStub(channel).Generate(request, timeout=timeout)
        try:
            yield from call
        finally:
            call.cancel()  # a no-op once the call has completed
