"""Fixtures for end-to-end service tests: a tiny model and a launched service per transport."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from minisgl_core.testing.service import RunningService, launch_service

TRANSPORTS = ["zmq", "nng"]
SERVICE_ARGS = ["--max-seq-len-override", "512", "--num-pages", "256", "--page-size", "16"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama with a small tokenizer, built in code."""
    from minisgl_core.testing.tiny import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama"))


@pytest.fixture(scope="module", params=TRANSPORTS)
def service(request: pytest.FixtureRequest, tiny_model: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """One launched service per transport, shared by the tests of a module."""
    svc = launch_service(tiny_model, transport=request.param, args=SERVICE_ARGS,
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers(), f"orphan workers:\n{svc.log()[-2000:]}"
