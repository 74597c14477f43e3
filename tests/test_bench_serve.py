"""`minisgl bench serve` against a launched service (tiny model) and a minimal OpenAI server."""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from minisgl_core.bench import results, serve, serve_cli
from minisgl_core.testing.service import RunningService, free_port, launch_service

SERVICE_ARGS = ["--max-seq-len-override", "512", "--num-pages", "256", "--page-size", "16"]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    from minisgl_core.testing.tiny import make_tiny_model

    model = make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama")
    svc = launch_service(str(model), transport="zmq", args=SERVICE_ARGS,
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(serve_cli.serve_command)
    return app


def check_level(level: dict[str, Any], concurrency: int, requests: int, max_tokens: int) -> None:
    assert level["concurrency"] == concurrency
    assert (level["requests"], level["completed"], level["failures"]) == (requests, requests, 0)
    assert level["errors"] == []
    assert level["ignore_eos"] is True
    assert level["output_tokens"] == requests * max_tokens  # EOS ignored: every token counted
    assert level["prompt_tokens"] > requests
    assert level["duration_s"] > 0
    assert level["output_tok_s"] == pytest.approx(level["output_tokens"] / level["duration_s"])
    assert level["req_s"] == pytest.approx(requests / level["duration_s"])
    for metric in ("ttft", "tpot", "e2e"):
        p50, p99 = level[f"{metric}_p50_ms"], level[f"{metric}_p99_ms"]
        assert 0 <= p50 <= p99, metric
    assert level["ttft_p99_ms"] <= level["e2e_p99_ms"]
    # a request lasts at least its TTFT plus (n - 1) token gaps, and no longer than the level
    assert level["e2e_p50_ms"] <= level["duration_s"] * 1000


def generated(service: RunningService) -> float:
    return service.metrics()["minisgl_generation_tokens_total"]


def test_serve_reports_each_level(service: RunningService,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    before = generated(service)
    results = serve_cli.main(service.url, [1, 4], 8, 8, json_lines=True, progress=False)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == results
    assert len(results) == 2
    check_level(results[0], 1, 8, 8)
    check_level(results[1], 4, 8, 8)
    # the server counted the same tokens, plus the uncounted warm-ups: the probe and one short
    # wave per level, 4 tokens each
    expected = before + 2 * 8 * 8 + 4 * (1 + 1 + 4)
    assert service.wait_metrics(
        lambda m: m["minisgl_generation_tokens_total"] >= expected,
        what=f"{expected} generated tokens counted")["minisgl_generation_tokens_total"] == expected


def test_serve_command_table_and_json(service: RunningService) -> None:
    runner = CliRunner()
    args = ["--url", service.url, "--concurrency", "2", "--requests", "4", "--max-tokens", "4"]
    out = runner.invoke(cli(), [*args, "--json"])
    assert out.exit_code == 0, out.output
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    check_level(json.loads(line), 2, 4, 4)
    out = runner.invoke(cli(), [*args, "--model", service.model_name()])
    assert out.exit_code == 0, out.output
    header, rule, row = out.stdout.splitlines()[:3]
    assert "TTFT p50 ms" in header and set(rule) <= {"|", "-", ":"}
    assert row.split("|")[1].strip() == "2"


def test_serve_extra_body_constrains_every_request(service: RunningService) -> None:
    extra = {"structured_outputs": {"choice": ["yes", "no"]}}
    runner = CliRunner()
    args = ["--url", service.url, "--concurrency", "2", "--requests", "4", "--max-tokens", "8",
            "--json", "--extra-body", json.dumps(extra)]
    out = runner.invoke(cli(), args)
    assert out.exit_code == 0, out.output
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    level = json.loads(line)
    assert level["failures"] == 0
    # "yes" / "no" are a few tokens, then the grammar ends the request (ignore_eos or not)
    assert level["output_tokens"] < 4 * 8
    bad = runner.invoke(cli(), [*args[:-1], "[1]"])
    assert bad.exit_code == 2 and "JSON object" in bad.output


def test_arrivals_are_a_seeded_poisson_process() -> None:
    assert serve.arrival_offsets(3, None) == [0.0, 0.0, 0.0]  # closed loop: all due at once
    due = serve.arrival_offsets(4000, 20.0)
    assert due == serve.arrival_offsets(4000, 20.0) and due[0] == 0.0
    gaps = np.diff(due)
    assert (gaps > 0).all()
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.05)  # 3,999 gaps: ~1.6% standard error
    assert np.std(gaps) == pytest.approx(1 / 20, rel=0.1)  # exponential: std = mean


def test_serve_with_a_request_rate_sends_each_request_at_its_time(
        service: RunningService) -> None:
    out = CliRunner().invoke(cli(), ["--url", service.url, "--concurrency", "8", "--requests",
                                     "6", "--max-tokens", "4", "--request-rate", "5", "--json"])
    assert out.exit_code == 0, out.output
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    level = json.loads(line)
    check_level(level, 8, 6, 4)
    assert level["request_rate"] == 5.0
    # the last request was not sent before its arrival time, however fast the server answers
    assert level["duration_s"] >= serve.arrival_offsets(6, 5.0)[-1]
    bad = CliRunner().invoke(cli(), ["--url", service.url, "--request-rate", "0"])
    assert bad.exit_code == 2


def test_serve_unreachable_server_exits_1() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = CliRunner().invoke(cli(), ["--url", url, "--requests", "1"])
    assert out.exit_code == 1
    assert f"minisgl: error: {url}" in out.stderr


def test_percentile_matches_numpy() -> None:
    values = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0, float("nan")]
    finite = [v for v in values if not math.isnan(v)]
    for q in (0, 50, 90, 99, 100):
        assert results.percentile(values, q) == pytest.approx(np.percentile(finite, q))
    assert math.isnan(results.percentile([], 50))


# ---- a minimal OpenAI-style server: refuses ignore_eos, streams without usage ----------------

CHUNKS = ["Hel", "lo", " there"]


def strict_app(chunks: tuple[str, ...] = tuple(CHUNKS), usage: int | None = None) -> Any:
    """``chunks`` as the answer's deltas; with ``usage``, a last chunk saying that many tokens."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "strict-model"}]})

    async def chat(request: Request) -> Any:
        body = await request.json()
        if "ignore_eos" in body:
            return JSONResponse({"error": {"message": "unknown field ignore_eos",
                                           "type": "invalid_request_error"}}, status_code=400)
        assert body["model"] == "strict-model" and body["stream"] is True

        async def events() -> Any:
            for text in chunks:
                chunk = {"choices": [{"index": 0, "delta": {"content": text},
                                      "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            done: dict[str, Any] = {"choices": [{"index": 0, "delta": {},
                                                 "finish_reason": "stop"}]}
            if usage is not None:
                done["usage"] = {"completion_tokens": usage, "prompt_tokens": 5}
            yield f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/models", models),
                             Route("/v1/chat/completions", chat, methods=["POST"])])


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """``app`` served on a free 127.0.0.1 port for the block; its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def strict_server() -> Iterator[str]:
    with running(strict_app()) as url:
        yield url


def test_serve_drops_refused_ignore_eos(strict_server: str) -> None:
    (level,) = serve_cli.main(strict_server, [3], 6, 64, json_lines=False, progress=False)
    assert level["ignore_eos"] is False
    assert (level["completed"], level["failures"]) == (6, 0)
    assert level["output_tokens"] == 6 * len(CHUNKS)  # no usage chunk: one token per text chunk
    assert level["prompt_tokens"] == 0


def test_answers_of_many_tokens_without_text_are_failures() -> None:
    # a step that made token 0 every time streamed empty deltas: no speed is read from it, the
    # warm-up request says why
    with running(strict_app(("", ""), usage=64)) as url, \
            pytest.raises(RuntimeError, match="64 tokens without any text"):
        serve_cli.main(url, [2], 4, 64, json_lines=False, progress=False)
    with running(strict_app(("", "Paris"), usage=64)) as url:  # some text: an answer
        (level,) = serve_cli.main(url, [2], 4, 64, json_lines=False, progress=False)
    assert (level["completed"], level["failures"]) == (4, 0)


# ---- a server that closes each connection after a streamed answer, unannounced --------------

async def _closing_server(unanswered: list[bytes]) -> Any:
    """HTTP/1.1 on 127.0.0.1 that streams one SSE answer per connection, then closes it
    without `Connection: close` (as llama.cpp's server does), a moment after the answer;
    what arrived on it meanwhile (a request it will not answer) goes to ``unanswered``."""
    import asyncio

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        events = [{"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n"
                     + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        await writer.drain()
        try:  # the client sends its next request on this connection at once
            unanswered.append(await asyncio.wait_for(reader.read(1), 0.05))
        except TimeoutError:
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_a_connection_the_server_closed_is_retried_on_a_new_one() -> None:
    import asyncio

    import aiohttp

    unanswered: list[bytes] = []

    async def run() -> list[serve.Record]:
        server = await _closing_server(unanswered)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        out = []
        async with server, aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1)) as session:
            for _ in range(4):  # each next one goes out on the pooled connection at once
                out.append(await serve.one_request(session, url, body))
        return out

    records = asyncio.run(run())
    assert [(r.ok, r.error) for r in records] == [(True, "")] * 4
    assert b"P" in unanswered  # some went out on a connection being closed: sent again


def test_padded_prompts_differ_from_their_first_words_and_short_ones_do_not_change() -> None:
    # the topics repeat every 8 requests: a long prompt must not be another's, or a prefix cache
    # would serve it
    first, again = (serve.make_messages(i, 300)[0]["content"].split() for i in (0, 8))
    assert len(first) == len(again) == 300 and first[:2] != again[:2]
    assert first[2:] == again[2:]  # the same topic and padding after the request's number
    assert serve.make_messages(8)[0]["content"] == serve.make_messages(0)[0]["content"]
