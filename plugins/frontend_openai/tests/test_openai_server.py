"""OpenAIFrontend as the launcher uses it: registration, binding, signals, options, shutdown."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import minisgl_frontend_openai
import pytest
from minisgl_frontend_openai.server import OpenAIFrontend

from minisgl_core.api import LaunchConfig

CONFIG = LaunchConfig()


def options(port: int = 0, **more: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": port, **more}


def test_plugin_registers_the_openai_frontend_lazily() -> None:
    seen: list[tuple[str, Any]] = []
    minisgl_frontend_openai.minisgl_register_frontends(
        register=lambda n, t, **kw: seen.append((n, t, kw)))
    # offered as the frontend a service serves when none is named
    assert seen == [("openai", "minisgl_frontend_openai.server:OpenAIFrontend", {"default": True})]
    module, attr = seen[0][1].split(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is OpenAIFrontend
    heavy = subprocess.run(
        [sys.executable, "-c", "import sys, minisgl_frontend_openai; print(sorted(m for m in "
         "sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette', 'pydantic')))"],
        capture_output=True, text=True, timeout=60, check=True)
    assert heavy.stdout.strip() == "[]"


def test_unknown_options_are_rejected(kit: Any) -> None:
    with pytest.raises(ValueError, match="max_body"):
        OpenAIFrontend(kit.ScriptedEngineClient(), CONFIG, options(max_body=1))


def test_serves_in_the_main_thread_without_touching_signals(kit: Any) -> None:
    signals = (signal.SIGINT, signal.SIGTERM)
    frontend = OpenAIFrontend(kit.ScriptedEngineClient(), CONFIG, options())

    async def main() -> tuple[int, dict[int, Any], dict[int, Any]]:
        before = {sig: signal.getsignal(sig) for sig in signals}  # asyncio.run's own SIGINT
        serving = asyncio.create_task(frontend.serve())
        await asyncio.wait_for(frontend.wait_started(), 10)
        during = {sig: signal.getsignal(sig) for sig in signals}
        async with httpx.AsyncClient(timeout=10) as http:
            status = (await http.get(frontend.url + "/models")).status_code
        await asyncio.wait_for(frontend.shutdown(), 15)
        await asyncio.wait_for(serving, 5)
        return status, before, during

    status, before, during = asyncio.run(main())
    assert status == 200 and during == before


def test_binding_port_zero_and_a_busy_port(kit: Any) -> None:
    first = OpenAIFrontend(kit.ScriptedEngineClient(), CONFIG, options())
    port = first.bind()
    assert port > 0 and first.bind() == port and first.url == f"http://127.0.0.1:{port}/v1"
    second = OpenAIFrontend(kit.ScriptedEngineClient(), CONFIG, options(port))
    with pytest.raises(OSError):
        second.bind()
    asyncio.run(first.shutdown())  # never served: just releases the socket
    probe = socket.create_server(("127.0.0.1", port))  # the port is free again
    probe.close()


def test_shutdown_before_serve_means_serve_returns_at_once(kit: Any) -> None:
    frontend = OpenAIFrontend(kit.ScriptedEngineClient(), CONFIG, options())

    async def main() -> bool:
        await frontend.shutdown()
        await asyncio.wait_for(frontend.serve(), 5)
        return await asyncio.wait_for(frontend.wait_started(), 5)

    assert asyncio.run(main()) is False


def test_shutdown_ends_in_flight_answers_with_an_error(kit: Any) -> None:
    engine = kit.ScriptedEngineClient()
    running = kit.RunningServer(engine, options={"graceful_shutdown_s": 30})
    body = {"prompt": "[slow] at shutdown", "max_tokens": 200, "ignore_eos": True}
    with ThreadPoolExecutor(1) as pool, httpx.Client(timeout=10) as http, \
            http.stream("POST", running.url + "/completions",
                        json={**body, "stream": True}) as r:
        chunks = r.iter_bytes()
        first = next(chunks)
        waiting = pool.submit(httpx.post, running.url + "/completions", json=body, timeout=10)
        assert kit.wait_for(lambda: len(engine.active) == 2)
        running.stop()  # well under graceful_shutdown_s: nothing is left hanging
        rest = b"".join(chunks)
        answer = waiting.result(10)
    events = (first + rest).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    assert json.loads(events[-3][6:])["error"]["code"] == "shutting_down"
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "shutting_down"
    assert kit.wait_for(lambda: len(engine.aborted) == 2 and not engine.active)


def test_metrics_can_require_the_key(kit: Any) -> None:
    running = kit.RunningServer(kit.ScriptedEngineClient(), api_key="k",
                                options={"metrics_require_key": True})
    try:
        with httpx.Client(timeout=10) as http:
            assert http.get(running.base + "/metrics").status_code == 401
            assert http.get(running.base + "/metrics",
                            headers={"authorization": "Bearer k"}).status_code == 200
            assert http.get(running.base + "/health").status_code == 200
    finally:
        running.stop()
