"""Long requests kept in flight while something happens to the service, and how each one ended.

Used by the fault tests: start ``count`` long requests (half streaming), wait for the first
stream to speak (or for a ``ready`` condition), run an action (kill a worker, SIGTERM the
launcher), then collect every request's ending with a deadline. Endings: ``completed`` (a valid
full answer), ``error_event`` (a stream that reported an error event and then [DONE]),
``error_status`` (a 5xx or 4xx with the error envelope), ``closed`` (the connection went away),
``hang`` (nothing before the deadline) and ``bad`` (anything dressed up as success that is not:
[DONE] without a finish or an error).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from reliability_support import AUTH, Service

OK_ENDINGS = {"completed", "error_event", "error_status", "closed"}


@dataclass(frozen=True)
class Ending:
    """How one in-flight request ended."""

    kind: str
    detail: str = ""


async def _stream(client: httpx.AsyncClient, url: str, body: dict[str, object],
                  started: asyncio.Event) -> Ending:
    finished = error = done = False
    async with client.stream("POST", url, json=body, headers=AUTH) as resp:
        if resp.status_code != 200:
            return _status_ending(resp.status_code, await resp.aread())
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            if done:
                return Ending("bad", f"a frame after [DONE]: {line[:100]}")
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            started.set()  # the first frame comes once the engine holds the request
            if "error" in chunk:
                error = True
            elif any(c.get("finish_reason") for c in chunk.get("choices", [])):
                finished = True
    if error and done:
        return Ending("error_event")
    if finished and done:
        return Ending("completed")
    if not done:
        return Ending("closed", "stream ended without [DONE]")
    return Ending("bad", "[DONE] without a finish_reason or an error event")


async def _whole(client: httpx.AsyncClient, url: str, body: dict[str, object]) -> Ending:
    resp = await client.post(url, json=body, headers=AUTH)
    if resp.status_code == 200:
        choices = resp.json().get("choices") or []
        if choices and all(c.get("finish_reason") in ("stop", "length") for c in choices):
            return Ending("completed")
        return Ending("bad", f"200 without a finish: {resp.text[:200]}")
    return _status_ending(resp.status_code, resp.content)


def _status_ending(status: int, content: bytes) -> Ending:
    try:
        err = json.loads(content)["error"]
        assert isinstance(err, dict) and err.get("message")
    except (ValueError, KeyError, TypeError, AssertionError):
        return Ending("bad", f"status {status} without the error envelope: {content[:200]!r}")
    return Ending("error_status", f"{status}: {err['message'][:120]}")


async def _one(client: httpx.AsyncClient, svc: Service, i: int, max_tokens: int,
               deadline: float, started: asyncio.Event) -> Ending:
    stream = i % 2 == 0
    body: dict[str, object] = {"model": svc.model, "max_tokens": max_tokens, "stream": stream,
                               "ignore_eos": True, "temperature": 0}
    if i % 3 == 0:
        body["prompt"] = f"request {i} of a long load"
        url = f"{svc.url}/v1/completions"
    else:
        body["messages"] = [{"role": "user", "content": f"request {i}, go on and on"}]
        url = f"{svc.url}/v1/chat/completions"
    try:
        work = _stream(client, url, body, started) if stream else _whole(client, url, body)
        return await asyncio.wait_for(work, max(0.1, deadline - time.monotonic()))
    except TimeoutError:
        return Ending("hang", "no ending before the deadline")
    except (httpx.TransportError, httpx.StreamError) as exc:  # torn down under us: allowed
        return Ending("closed", type(exc).__name__)


async def _run(svc: Service, count: int, max_tokens: int, action: Callable[[], None],
               deadline_s: float, ready: Callable[[], bool] | None) -> list[Ending]:
    limits = httpx.Limits(max_connections=count + 4)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(deadline_s)) as client:
        far = time.monotonic() + 600
        started = asyncio.Event()
        tasks = [asyncio.create_task(_one(client, svc, i, max_tokens, far, started))
                 for i in range(count)]
        # every request was sent at once: when the first stream speaks, the others are in
        # flight too. Act at once: the tiny model finishes 200 tokens in well under a second.
        await asyncio.wait_for(started.wait() if ready is None else _until(ready), 60)
        action()
        # from now on every request has deadline_s to end, whatever happened to the service
        return list(await asyncio.wait_for(_bounded(tasks, deadline_s), deadline_s + 5))


async def _until(ready: Callable[[], bool]) -> None:
    while not await asyncio.to_thread(ready):  # blocking probes off the loop the requests use
        await asyncio.sleep(0.05)


async def _bounded(tasks: list[asyncio.Task[Ending]], deadline_s: float) -> list[Ending]:
    done, pending = await asyncio.wait(tasks, timeout=deadline_s)
    for task in pending:
        task.cancel()
    return [t.result() if t in done else Ending("hang", "no ending before the deadline")
            for t in tasks]


def load_then(svc: Service, action: Callable[[], None], *, count: int = 12,
              max_tokens: int = 200, deadline_s: float = 20,
              ready: Callable[[], bool] | None = None) -> Counter[str]:
    """Keep ``count`` long requests in flight, run ``action`` once the first stream speaks (or
    once ``ready()`` holds), return their endings; fails on any hang or bad ending."""
    endings = asyncio.run(_run(svc, count, max_tokens, action, deadline_s, ready))
    bad = [e for e in endings if e.kind not in OK_ENDINGS]
    assert not bad, f"{bad}\n{svc.log()[-3000:]}"
    return Counter(f"status {e.detail.split(':', 1)[0]}" if e.kind == "error_status" else e.kind
                   for e in endings)
