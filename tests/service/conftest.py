"""Fixtures for end-to-end service tests: a tiny model and a launched service per transport."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from minisgl_core.testing.remote import remote_service
from minisgl_core.testing.service import RunningService, launch_service

TRANSPORTS = ["zmq", "nng"]
# One torch thread per scheduler: two OpenMP threads that wait for each other at every op crawl
# when other processes hold the cores (a busy CI runner, the other pytest worker).
SERVICE_ARGS = ["--dtype", "float32", "--max-seq-len-override", "512", "--num-pages", "256",
                "--page-size", "16", "-s", "num_threads=1"]
LaunchVariant = Callable[..., AbstractContextManager[RunningService]]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama with a small tokenizer, built in code."""
    from minisgl_core.testing.tiny import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama"))


@pytest.fixture(scope="session")
def tcp_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keys for every transport, made by `minisgl keys new` as a user would."""
    target = tmp_path_factory.mktemp("keys") / "service"
    subprocess.run([sys.executable, "-m", "minisgl_core", "keys", "new", str(target)],
                   check=True, capture_output=True, timeout=300)
    return target


@pytest.fixture(scope="session")
def launch_variant(request: pytest.FixtureRequest, tiny_model: str,
                   tmp_path_factory: pytest.TempPathFactory) -> LaunchVariant:
    """``with launch_variant("zmq") as svc:`` a service of the tiny model over one transport;
    "zmq+tcp" (or "nng+tcp") puts it on tcp endpoints with ``tcp_keys``, and keyword arguments
    set more keys of that transport's table; "zmq+remote" is "zmq+tcp" whose scheduler is a
    `minisgl worker` in a process group of its own; "zmq+dp2" runs two scheduler replicas."""

    @contextmanager
    def start(variant: str, *args: str, **options: Any) -> Iterator[RunningService]:
        name, _, endpoints = variant.partition("+")
        if endpoints == "remote":
            sets = [arg for key, value in options.items()
                    for arg in ("-s", f"transports.{name}.{key}={value}")]
            with remote_service(tiny_model, request.getfixturevalue("tcp_keys"),
                                tmp_path_factory.mktemp("logs"), [*SERVICE_ARGS, *sets, *args],
                                transport=name) as remote:
                yield remote.svc
            return
        if endpoints.startswith("dp"):  # "zmq+dp2": ipc endpoints, --dp 2
            endpoints, args = "", ("--dp", endpoints[2:], *args)
        table = {"endpoints": endpoints, "keys": request.getfixturevalue("tcp_keys"),
                 **options} if endpoints else options
        sets = [arg for key, value in table.items()
                for arg in ("-s", f"transports.{name}.{key}={value}")]
        svc = launch_service(tiny_model, transport=name, args=[*SERVICE_ARGS, *sets, *args],
                             log_dir=tmp_path_factory.mktemp("logs"))
        try:
            yield svc
        finally:
            svc.stop()
            assert not svc.leftover_workers(), f"orphan workers:\n{svc.log()[-2000:]}"

    return start


@pytest.fixture(scope="module", params=TRANSPORTS)
def service(request: pytest.FixtureRequest,
            launch_variant: LaunchVariant) -> Iterator[RunningService]:
    """One launched service per transport, shared by the tests of a module."""
    with launch_variant(request.param) as svc:
        yield svc
