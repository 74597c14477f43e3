"""The launcher's event loop: uvloop when installed, asyncio's on request."""

from __future__ import annotations

import asyncio

import pytest

from minisgl_core.service.serve import event_loop_factory


def test_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.delenv("MINISGL_EVENT_LOOP", raising=False)
    factory = event_loop_factory()
    assert factory is uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), uvloop.Loop)


def test_asyncio_loop_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINISGL_EVENT_LOOP", "asyncio")
    assert event_loop_factory() is None
