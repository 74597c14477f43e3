"""Fixtures for the reliability tests: a tiny model and a pool of launched, key-protected services.

Launching a service costs seconds of CPU (three processes import torch), so the tests of this
folder share one service per transport through ``ServicePool``; a test that kills a service takes
it out of the pool (``pool.take``) and the next user gets a fresh one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# --import-mode=importlib puts no test folder on sys.path: make the support module importable.
sys.path.insert(0, str(Path(__file__).parent))

from reliability_support import ServicePool  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama with a small tokenizer, built in code."""
    from minisgl_core.testing.tiny import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama"))


@pytest.fixture(scope="session")
def pool(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServicePool]:
    """Services shared by this folder's tests, stopped (and checked for orphans) at the end."""
    services = ServicePool(tiny_model, tmp_path_factory.mktemp("reliability-logs"))
    try:
        yield services
    finally:
        problems = services.close()
        assert not problems, problems
