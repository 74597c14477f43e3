"""`minisgl bench serve`: an async streaming-chat load generator for OpenAI-compatible servers."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from minisgl_core.bench.results import Record, ServeResult

if TYPE_CHECKING:
    import aiohttp

TOPICS = ("the history of the bicycle", "how rainbows form", "why the sky is blue",
          "the rules of chess", "how bread rises", "the life of honey bees",
          "how a compass works", "the water cycle")
FILLER = ("Please answer with care, give a few concrete examples and facts, and explain each "
          "step in plain words so that a curious student can follow along easily. ").split()
GRACE_S = 300.0  # after the time limit, requests in flight get this long before they are cut
WORDLESS_TOKENS = 8  # an answer of this many tokens or more without any text is a failure


def make_messages(index: int, prompt_len: int | None = None) -> list[dict[str, str]]:
    """The chat of request ``index``: a short question, padded to ~``prompt_len`` words. A padded
    prompt starts with the request's number: the topics repeat every 8 requests, and a repeated
    long prompt would be served from the prefix cache by the engines that keep one (or not, by
    the size of their cache), which measures the cache, not the prefill."""
    words = f"Tell me about {TOPICS[index % len(TOPICS)]}.".split()
    if prompt_len:
        words = [*f"Request {index}:".split(), *words]
        words += list(itertools.islice(itertools.cycle(FILLER), max(0, prompt_len - len(words))))
    return [{"role": "user", "content": " ".join(words)}]


def default_requests(concurrency: int) -> int:
    """Requests per level when not given: two full waves, at least 8."""
    return max(8, 2 * concurrency)


def _error_text(raw: str) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw[:200]


async def _sse_data(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The ``data:`` payloads of an event stream, as they arrive (lines of any length)."""
    buf = b""
    async for piece in resp.content.iter_any():
        buf += piece
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip()
    if buf.startswith(b"data:"):
        yield buf[5:].strip()


async def one_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Record:
    """Stream one chat completion; TTFT is the first chunk with text (or any chunk if none).

    A request whose pooled connection the server had already closed (llama.cpp's server
    closes each after a streamed answer, without saying so) fails before a byte is sent; it is
    sent once more on a new connection, as OpenAI's clients do, timed from the first try.
    """
    import aiohttp

    start = time.perf_counter()
    try:
        try:
            return await _stream(session, url, body, start)
        except _Unsent:  # any other pooled connection may be closed too: a new one, for sure
            async with aiohttp.ClientSession(headers=session.headers,
                                             timeout=session.timeout) as fresh:
                return await _stream(fresh, url, body, start)
    except (_Unsent, aiohttp.ClientError, TimeoutError, ValueError) as exc:
        cause = exc.__cause__ if isinstance(exc, _Unsent) else exc
        return Record(False, start, math.nan, time.perf_counter() - start, 0, 0,
                      f"{type(cause).__name__}: {cause}")


class _Unsent(Exception):
    """The connection failed before the server answered with headers (a stale keep-alive)."""


async def _stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                  start: float) -> Record:
    """One streamed chat completion from ``start``; _Unsent if no response began."""
    import aiohttp

    first_text = first_any = math.nan
    text_chunks = prompt_tokens = 0
    usage: dict[str, Any] | None = None
    finish: str | None = None
    error = ""
    try:
        response = await session.post(f"{url}/v1/chat/completions", json=body)
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
        raise _Unsent from exc
    async with response as resp:
        if resp.status != 200:
            raw = (await resp.read()).decode(errors="replace")
            error = f"HTTP {resp.status}: {_error_text(raw)}"
        else:
            async for data in _sse_data(resp):
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                now = time.perf_counter() - start
                if chunk.get("error"):
                    error = f"stream error: {chunk['error'].get('message', chunk['error'])}"
                    break
                for choice in chunk.get("choices") or ():
                    first_any = now if math.isnan(first_any) else first_any
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content"):
                        first_text = now if math.isnan(first_text) else first_text
                        text_chunks += 1
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
    e2e = time.perf_counter() - start
    if not error and finish is None:
        error = "the stream ended without a finish_reason"
    if usage:
        tokens, prompt_tokens = int(usage["completion_tokens"]), int(usage["prompt_tokens"])
    else:  # a server without include_usage: one chunk per token is the best guess
        tokens = text_chunks
    if not error and tokens >= WORDLESS_TOKENS and not text_chunks:
        # a real model says something in that many tokens: a speed of answers without text
        # (special tokens, token 0 from a broken step) is no speed at all
        error = f"{tokens} tokens without any text"
    ttft = first_text if not math.isnan(first_text) else first_any
    return Record(not error, start, ttft, e2e, tokens, prompt_tokens, error)


def request_body(model: str, index: int, max_tokens: int, prompt_len: int | None,
                 options: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of request ``index`` (greedy, streaming, plus the accepted options)."""
    return {"model": model, "messages": make_messages(index, prompt_len), "stream": True,
            "max_tokens": max_tokens, "temperature": 0.0, **options}


async def probe(session: aiohttp.ClientSession, url: str, model: str,
                prompt_len: int | None) -> dict[str, Any]:
    """Warm up with one short request and find which extras the server takes: ``ignore_eos``
    and ``stream_options.include_usage``, dropped one by one on a 400."""
    candidates = [{"ignore_eos": True, "stream_options": {"include_usage": True}},
                  {"stream_options": {"include_usage": True}}, {}]
    last = ""
    for options in candidates:
        rec = await one_request(session, url, request_body(model, 0, 4, prompt_len, options))
        if rec.ok:
            return options
        last = rec.error
        if not rec.error.startswith("HTTP 400"):
            break
    raise RuntimeError(f"the warm-up request failed: {last}")


def arrival_offsets(requests: int, rate: float | None, seed: int = 0) -> list[float]:
    """When each request is due, in seconds from the level's start: a Poisson process of
    ``rate`` requests a second (exponential gaps, seeded: every run and engine sends at the same
    times), the first at 0; all at 0 without a rate."""
    if rate is None or requests == 0:
        return [0.0] * requests
    rng = random.Random(seed)
    gaps = [rng.expovariate(rate) for _ in range(requests - 1)]
    return list(itertools.accumulate(gaps, initial=0.0))


async def run_level(session: aiohttp.ClientSession, url: str, model: str, concurrency: int,
                    requests: int, max_tokens: int, prompt_len: int | None,
                    options: dict[str, Any], duration_limit_s: float,
                    progress: bool = True, request_rate: float | None = None) -> ServeResult:
    """``requests`` requests, ``concurrency`` at a time: each as soon as one ends (closed loop),
    or with ``request_rate`` each at its Poisson arrival time once one of the ``concurrency``
    slots is free (vLLM's ``--request-rate`` with ``--max-concurrency``); no new request starts
    after ``duration_limit_s`` and those still running ``GRACE_S`` later are cut."""
    from tqdm import tqdm

    # one short wave first (not counted): the batch shapes of this level are warm when timed
    await asyncio.gather(*(one_request(session, url, request_body(
        model, i, min(4, max_tokens), prompt_len, options)) for i in range(concurrency)))
    counter = itertools.count()
    due = arrival_offsets(requests, request_rate)
    records: list[Record] = []
    started = 0
    t0 = time.perf_counter()
    bar = tqdm(total=requests, desc=f"concurrency {concurrency}", unit="req", file=sys.stderr,
               disable=not progress, leave=False)

    async def worker() -> None:
        nonlocal started
        while (i := next(counter)) < requests and time.perf_counter() - t0 < duration_limit_s:
            if (wait := t0 + due[i] - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
                if time.perf_counter() - t0 >= duration_limit_s:
                    break
            started += 1
            body = request_body(model, i, max_tokens, prompt_len, options)
            records.append(await one_request(session, url, body))
            bar.update(1)

    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, requests))]
    _, pending = await asyncio.wait(tasks, timeout=duration_limit_s + GRACE_S)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    bar.close()
    end = max((r.start + r.e2e for r in records), default=time.perf_counter())
    result = ServeResult.from_records(concurrency, started, records, end - t0, max_tokens,
                                      bool(options.get("ignore_eos")))
    return dataclasses.replace(result, request_rate=request_rate)


async def fetch_model(session: aiohttp.ClientSession, url: str) -> str:
    """The first id /v1/models lists."""
    async with session.get(f"{url}/v1/models") as resp:
        resp.raise_for_status()
        return str((await resp.json())["data"][0]["id"])


async def run_serve(url: str, concurrency: Sequence[int], requests: int | None, max_tokens: int,
                    *, model: str | None = None, prompt_len: int | None = None,
                    duration_limit_s: float = 300.0, api_key: str | None = None,
                    progress: bool = True, extra_body: dict[str, Any] | None = None,
                    request_rate: float | None = None) -> list[ServeResult]:
    """The async core: warm up, then one ServeResult per concurrency level, in order.

    aiohttp, not httpx: the client shares the machine with the server it measures, and httpx
    spends about 4x the CPU per streamed chunk (measured: ~140 us against ~35 us)."""
    import aiohttp

    url = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    connector = aiohttp.TCPConnector(limit=max(concurrency) + 4)
    timeout = aiohttp.ClientTimeout(total=GRACE_S + duration_limit_s, connect=10.0)
    async with aiohttp.ClientSession(headers=headers, connector=connector,
                                     timeout=timeout) as session:
        model = model or await fetch_model(session, url)
        # extra fields (response_format, tools...) go into every request after the probe
        options = {**await probe(session, url, model, prompt_len), **(extra_body or {})}
        return [await run_level(session, url, model, c, requests or default_requests(c),
                                max_tokens, prompt_len, options, duration_limit_s, progress,
                                request_rate) for c in concurrency]
