"""A client that goes away aborts its engine requests: streaming, non-streaming, before the first
token, with n choices, and through the official client; finished requests are never aborted."""

from __future__ import annotations

import asyncio
import random
import socket
from typing import Any

import httpx
import openai
import pytest

LONG = {"max_tokens": 200, "ignore_eos": True}  # with [slow]: ~4 s if nobody aborts it


def ids_for(engine: Any, marker: str) -> list[str]:
    return [r.request_id for r in engine.requests_with(marker)]


def all_aborted(engine: Any, kit: Any, marker: str, count: int) -> None:
    assert kit.wait_for(lambda: len(ids_for(engine, marker)) == count)
    ids = ids_for(engine, marker)
    assert kit.wait_for(lambda: set(ids) <= set(engine.aborted)), (ids, engine.aborted[-5:])
    assert not set(ids) & engine.active


def idle(server: Any, kit: Any) -> None:
    """The frontend holds no per-request state once nothing is in flight."""
    assert kit.wait_for(lambda: server.frontend.metrics.inflight == 0
                        and not server.frontend.app.state.live)


def test_stream_disconnect_aborts(server: Any, engine: Any, kit: Any) -> None:
    marker = "[slow] stream gone"
    body = {"messages": [{"role": "user", "content": marker}], "stream": True, **LONG}
    before = server.frontend.metrics.finished["abort"]
    with httpx.Client(timeout=10) as http, \
            http.stream("POST", server.url + "/chat/completions", json=body) as r:
        events = 0
        for _ in r.iter_bytes():  # a few chunks, then hang up mid-generation
            events += 1
            if events == 3:
                break
    all_aborted(engine, kit, marker, 1)
    idle(server, kit)
    assert server.frontend.metrics.finished["abort"] >= before + 1


def test_non_stream_disconnect_aborts(server: Any, engine: Any, kit: Any) -> None:
    marker = "[slow] waiting gone"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/completions", json={"prompt": marker, **LONG}, timeout=0.5)
    all_aborted(engine, kit, marker, 1)
    idle(server, kit)


@pytest.mark.parametrize("stream", [False, True])
def test_disconnect_before_the_first_token_aborts(server: Any, engine: Any, kit: Any,
                                                  stream: bool) -> None:
    marker = f"[first-delay=60] early gone {stream}"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/completions", json={"prompt": marker, "stream": stream},
                   timeout=0.5)
    all_aborted(engine, kit, marker, 1)  # long before the 60 s first token
    idle(server, kit)


def test_every_choice_is_aborted(server: Any, engine: Any, kit: Any) -> None:
    marker = "[slow] three gone"
    body = {"prompt": [marker, marker + " too"], "n": 3, "stream": True, **LONG}
    with httpx.Client(timeout=10) as http, \
            http.stream("POST", server.url + "/completions", json=body) as r:
        next(r.iter_bytes())
    all_aborted(engine, kit, marker, 6)
    idle(server, kit)


def test_openai_client_closing_a_stream_aborts(server: Any, engine: Any, kit: Any) -> None:
    marker = "[slow] sdk gone"
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    stream = client.chat.completions.create(model="scripted-model", stream=True,
                                            messages=[{"role": "user", "content": marker}],
                                            extra_body={"ignore_eos": True}, max_tokens=200)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    client.close()
    all_aborted(engine, kit, marker, 1)


def test_finished_requests_are_not_aborted(server: Any, engine: Any, kit: Any,
                                           http: httpx.Client) -> None:
    marker = "finish normally"
    http.post(server.url + "/completions", json={"prompt": marker, "n": 2, "max_tokens": 3})
    with http.stream("POST", server.url + "/completions",
                     json={"prompt": marker, "max_tokens": 3, "stream": True}) as r:
        r.read()
    ids = ids_for(engine, marker)
    assert len(ids) == 3 and not set(ids) & set(engine.aborted)
    idle(server, kit)


def test_error_in_one_choice_aborts_its_siblings(server: Any, engine: Any, kit: Any,
                                                 http: httpx.Client) -> None:
    # prompt 0 streams slowly; prompt 1 is rejected at once: the 400 must abort prompt 0
    body = {"prompt": ["[slow] sibling", " ".join(["w"] * 300)], **LONG}
    r = http.post(server.url + "/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    all_aborted(engine, kit, "[slow] sibling", 1)
    idle(server, kit)


def test_disconnect_aborts_through_the_api_key_middleware(keyed_server: Any, keyed_engine: Any,
                                                          kit: Any) -> None:
    marker = "[slow] keyed gone"
    body = {"prompt": marker, "stream": True, **LONG}
    headers = {"authorization": "Bearer sk-test-key"}
    with httpx.Client(timeout=10) as http, \
            http.stream("POST", keyed_server.url + "/completions", json=body,
                        headers=headers) as r:
        assert r.status_code == 200
        next(r.iter_bytes())
    all_aborted(keyed_engine, kit, marker, 1)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(keyed_server.url + "/completions", json={**body, "stream": False,
                                                            "prompt": marker + " 2"},
                   headers=headers, timeout=0.5)
    all_aborted(keyed_engine, kit, marker + " 2", 1)


def test_client_gone_while_sending_the_body(server: Any, kit: Any, http: httpx.Client,
                                            caplog: pytest.LogCaptureFixture) -> None:
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head + b'{"prompt": "half')
    r = http.post(server.url + "/completions", json={"prompt": "after half", "max_tokens": 1})
    assert r.status_code == 200
    idle(server, kit)
    assert not [rec for rec in caplog.records if rec.levelname == "ERROR"]


def test_mixed_concurrent_requests_leave_nothing_behind(server: Any, engine: Any,
                                                        kit: Any) -> None:
    """60 concurrent requests, a third of them dropped at random points: every engine request
    ends exactly once (finished or aborted) and the frontend is idle afterwards."""
    rng = random.Random(7)

    async def one(http: httpx.AsyncClient, i: int) -> None:
        stream = i % 2 == 0
        body = {"prompt": f"[slow] mixed {i}", "max_tokens": 15, "ignore_eos": True,
                "stream": stream}
        if stream:
            async with http.stream("POST", server.url + "/completions", json=body) as r:
                assert r.status_code == 200
                assert (await r.aread()).endswith(b"data: [DONE]\n\n")
        else:
            assert (await http.post(server.url + "/completions", json=body)).status_code == 200

    async def main() -> int:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(timeout=20, limits=limits) as http:
            tasks = [asyncio.create_task(one(http, i)) for i in range(60)]
            dropped = rng.sample(tasks, 20)
            for task in dropped:
                await asyncio.sleep(rng.uniform(0, 0.01))
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)
                    and not isinstance(r, asyncio.CancelledError)]
        assert not failures, failures[:3]
        return sum(isinstance(r, asyncio.CancelledError) for r in results)

    cancelled = asyncio.run(main())
    assert kit.wait_for(lambda: not engine.active and server.frontend.metrics.inflight == 0
                        and not server.frontend.app.state.live)
    ids = [r.request_id for r in engine.requests_with("[slow] mixed ")]
    aborted = [rid for rid in engine.aborted if rid in set(ids)]
    # a request dropped before it reached the engine has nothing to abort
    assert 0 < len(aborted) == len(set(aborted)) <= cancelled
    assert len(ids) == len(set(ids)) <= 60
    assert len(ids) - len(aborted) >= 60 - cancelled  # everything not dropped finished
