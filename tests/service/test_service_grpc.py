"""gRPC and OpenAI frontends on one engine, through real processes, for zmq and nng."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest

from minisgl_core.testing.service import RunningService, free_port, launch_service

ARGS = ["--max-seq-len-override", "512", "--num-pages", "256"]


@pytest.fixture(scope="module", params=["zmq", "nng"])
def both(request: pytest.FixtureRequest, tiny_model: str,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningService, str]]:
    grpc_port = free_port()
    svc = launch_service(tiny_model, transport=request.param, frontend="openai,grpc",
                         args=[*ARGS, "--grpc-port", str(grpc_port)],
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc, f"127.0.0.1:{grpc_port}"
    finally:
        svc.stop()
        assert not svc.leftover_workers()


def _idle(m: dict[str, float]) -> bool:
    return (m["minisgl_kv_pages_free"] == m["minisgl_kv_pages_total"]
            and m["minisgl_requests_running"] == 0 and m["minisgl_requests_waiting"] == 0)


def _ended(m: dict[str, float]) -> float:
    """Requests the scheduler has ended, for any reason (its finished_*_total counters)."""
    return sum(v for k, v in m.items()
               if k.startswith("minisgl_scheduler_finished_") and k.endswith("_total"))


def grpc_text(url: str, prompt: str, max_tokens: int) -> tuple[str, str, int]:
    from minisgl_frontend_grpc.client import build_request, stream_generate

    pieces, reason, completion = [], "", 0
    request = build_request(prompt, max_tokens=max_tokens, temperature=0.0)
    request.sampling.ignore_eos = True
    for msg in stream_generate(url, request, timeout=60):
        pieces.append(msg.text)
        if msg.finish_reason:
            reason, completion = msg.finish_reason, msg.usage.completion_tokens
    return "".join(pieces), reason, completion


def openai_text(svc: RunningService, prompt: str, max_tokens: int) -> str:
    r = httpx.post(f"{svc.url}/v1/completions", timeout=60, json={
        "model": svc.model_name(), "prompt": prompt, "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["text"])


def test_grpc_text_equals_openai_text(both: tuple[RunningService, str]) -> None:
    svc, url = both
    text, reason, completion = grpc_text(url, "Once upon a time", 20)
    assert (reason, completion) == ("length", 20)
    assert text == openai_text(svc, "Once upon a time", 20)


def test_grpc_cancel_frees_pages(both: tuple[RunningService, str]) -> None:
    from minisgl_frontend_grpc.client import build_request, pb2_grpc

    svc, url = both
    request = build_request("go on", max_tokens=400, temperature=0.0)
    request.sampling.ignore_eos = True
    # The tiny model's 400 tokens can all be made before its first message reaches a client on
    # a fast or loaded host, so the cancel is not timed from the client's side: the request
    # waits at the frozen scheduler, which then runs a few milliseconds (its prefill and a few
    # steps of 400) and is frozen again while the cancel travels; it finds the abort in its
    # inbox before its next step. Longer waits at each try (bounded) for a busy host's slower
    # way from the gRPC server to the scheduler.
    for attempt in range(3):
        before = svc.metrics()
        aborted = before.get("minisgl_scheduler_finished_abort_total", 0.0)
        passed_on, ended = before["minisgl_tokenizer_requests_total"], _ended(before)
        with grpc.insecure_channel(url) as channel:
            with svc.paused("scheduler") as scheduler:
                call = pb2_grpc.GeneratorStub(channel).Generate(request, timeout=60)
                svc.wait_metrics(lambda m, n=passed_on: m["minisgl_tokenizer_requests_total"] > n,
                                 what="the request passed on to the scheduler")
                scheduler.resume()
                time.sleep(0.005)
                scheduler.suspend()
                call.cancel()
                time.sleep(0.5 * 2 ** attempt)
        # the scheduler's figures reach /metrics a moment after it acts, and it may not have
        # read the request before it was frozen: wait for it to have ended the request
        m = svc.wait_metrics(lambda m, n=ended: _ended(m) > n and _idle(m),
                             what="the request ended and the service idle")
        assert _idle(m), m  # pages back whether the cancel or the length limit ended it
        if m.get("minisgl_scheduler_finished_abort_total", 0.0) > aborted:
            return
    pytest.fail(f"no cancel reached the scheduler in 3 tries: {m}")


def test_grpc_bad_request_is_invalid_argument(both: tuple[RunningService, str]) -> None:
    from minisgl_frontend_grpc.client import build_request, stream_generate

    _, url = both
    request = build_request("x " * 2000, max_tokens=4)
    with pytest.raises(grpc.RpcError) as err:
        list(stream_generate(url, request, timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "512" in (err.value.details() or "")


def test_both_frontends_share_batches(both: tuple[RunningService, str]) -> None:
    svc, url = both
    with ThreadPoolExecutor(8) as ex:
        # the scheduler frozen, requests from both frontends queue at it together, however
        # slowly this machine lets the client threads send them (see test_service_openai)
        passed_on = svc.metrics()["minisgl_tokenizer_requests_total"]
        with svc.paused("scheduler"):
            grpc_jobs = [ex.submit(grpc_text, url, f"g{i}", 448) for i in range(4)]
            http_jobs = [ex.submit(openai_text, svc, f"h{i}", 448) for i in range(4)]
            # all eight, from both frontends, wait in the frozen scheduler's inbox
            svc.wait_metrics(lambda m: m["minisgl_tokenizer_requests_total"] >= passed_on + 8,
                             what="8 requests passed on to the scheduler")
        assert all(job.result()[2] == 448 for job in grpc_jobs)
        assert all(job.result() is not None for job in http_jobs)
    # the 4 HTTP requests at least were queued together (more than 4 in a step mixes frontends)
    peak = svc.metrics()["minisgl_scheduler_batch_peak"]
    assert peak >= 4, f"at most {peak} requests shared a step"
    print(f"peak batch of 4 gRPC + 4 HTTP requests: {peak:.0f}")
    assert _idle(svc.wait_metrics(_idle, what="the service idle"))


def test_grpc_logprobs_equal_the_openai_ones(both: tuple[RunningService, str]) -> None:
    from minisgl_frontend_grpc.client import build_request, stream_generate

    svc, url = both
    request = build_request("Once upon a time", max_tokens=6, temperature=0.0)
    request.sampling.ignore_eos = True
    request.sampling.logprobs = 2
    entries = [e for msg in stream_generate(url, request, timeout=60) for e in msg.logprobs]
    (choice,) = httpx.post(f"{svc.url}/v1/completions", timeout=60, json={
        "model": svc.model_name(), "prompt": "Once upon a time", "max_tokens": 6,
        "temperature": 0, "ignore_eos": True, "logprobs": 2}).json()["choices"]
    want = choice["logprobs"]
    assert [e.token for e in entries] == want["tokens"]
    # float32 on the wire; the second request may reuse the cached prompt: float noise only
    assert [e.logprob for e in entries] == pytest.approx(want["token_logprobs"], abs=1e-4)
    assert [{t.token: t.logprob for t in e.top} for e in entries] == [
        pytest.approx(d, abs=1e-4) for d in want["top_logprobs"]]
    plain = build_request("Once upon a time", max_tokens=2)
    assert all(not msg.logprobs for msg in stream_generate(url, plain, timeout=60))


def test_grpc_prompt_logprobs_equal_the_openai_ones(both: tuple[RunningService, str]) -> None:
    from minisgl_frontend_grpc.client import build_request, stream_generate

    svc, url = both
    request = build_request("Once upon a time", max_tokens=2, temperature=0.0)
    request.sampling.prompt_logprobs = 1
    messages = list(stream_generate(url, request, timeout=60))
    entries = [e for msg in messages for e in msg.prompt_logprobs]
    assert messages[0].prompt_logprobs  # all on the first message
    (choice,) = httpx.post(f"{svc.url}/v1/completions", timeout=60, json={
        "model": svc.model_name(), "prompt": "Once upon a time", "max_tokens": 0, "echo": True,
        "logprobs": 1}).json()["choices"]
    want = choice["logprobs"]
    assert [e.token for e in entries] == want["tokens"][1:]
    assert [e.logprob for e in entries] == pytest.approx(want["token_logprobs"][1:], abs=1e-4)
    assert [{t.token: t.logprob for t in e.top} for e in entries] == [
        pytest.approx(d, abs=1e-4) for d in want["top_logprobs"][1:]]
    bad = build_request("Once upon a time", max_tokens=2)
    bad.sampling.prompt_logprobs = 21
    with pytest.raises(grpc.RpcError) as err:
        list(stream_generate(url, bad, timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


SCHEMA = ('{"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", '
          '"minimum": 0, "maximum": 99}, "tag": {"enum": ["a", "b"]}}, "required": ["ok", "n", '
          '"tag"], "additionalProperties": false}')


def test_grpc_structured_output_equals_openai(both: tuple[RunningService, str]) -> None:
    import json

    from minisgl_frontend_grpc.client import build_request, stream_generate

    svc, url = both
    request = build_request("Facts:", max_tokens=80, temperature=0.0)
    request.sampling.structured.kind = "json_schema"
    request.sampling.structured.spec = SCHEMA
    msgs = list(stream_generate(url, request, timeout=60))
    text = "".join(m.text for m in msgs)
    assert msgs[-1].finish_reason == "stop"
    r = httpx.post(f"{svc.url}/v1/completions", timeout=60, json={
        "prompt": "Facts:", "max_tokens": 80, "temperature": 0, "response_format": {
            "type": "json_schema", "json_schema": {"name": "f", "schema": json.loads(SCHEMA)}}})
    assert r.status_code == 200, r.text
    assert text == r.json()["choices"][0]["text"]
    assert set(json.loads(text)) == {"ok", "n", "tag"}
    for kind, spec, says in (("json_schema", '{"type": "nope"}', "Unsupported type"),
                             ("yaml", "", "kind must be one of")):
        bad = build_request("x", max_tokens=4)
        bad.sampling.structured.kind = kind
        bad.sampling.structured.spec = spec
        with pytest.raises(grpc.RpcError) as err:
            list(stream_generate(url, bad, timeout=60))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert says in (err.value.details() or "")
    assert _idle(svc.wait_metrics(_idle, what="the service idle"))
