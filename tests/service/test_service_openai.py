"""End to end through real processes and sockets: the OpenAI client against `minisgl launch`,
over each transport's ipc endpoints and over tcp endpoints with keys."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from minisgl_core.testing.service import RunningService


@pytest.fixture(scope="module",
                params=["zmq", "nng", "zmq+tcp", "nng+tcp", "zmq+remote", "zmq+dp2"])
def service(request: pytest.FixtureRequest, launch_variant: Any) -> Iterator[RunningService]:
    """The conftest's service, over ipc and over tcp + keys (CURVE for zmq, TLS for nng), with
    its scheduler a separate `minisgl worker` process (zmq + CURVE), and with two scheduler
    replicas (--dp 2)."""
    with launch_variant(request.param) as svc:
        yield svc


def _idle(m: dict[str, float]) -> bool:
    return (m.get("minisgl_kv_pages_free") == m.get("minisgl_kv_pages_total")
            and m.get("minisgl_requests_running") == 0
            and m.get("minisgl_requests_waiting") == 0
            and m.get("minisgl_frontend_requests_inflight") == 0
            and m.get("minisgl_detokenizer_requests_active", 0) == 0)


def assert_idle(service: RunningService) -> None:
    service.wait_metrics(_idle, what="the service idle, every page free")


def per_replica(m: dict[str, float], name: str) -> list[float]:
    """``name`` of each scheduler replica (``{dp_rank="i"}`` under --dp), or the one value."""
    labelled = [v for k, v in sorted(m.items()) if k.startswith(name + '{dp_rank="')]
    return labelled or [m[name]]


def test_workers_are_named_processes(service: RunningService) -> None:
    import psutil

    titles = sorted(" ".join(psutil.Process(p).cmdline()).strip() for p in service.worker_pids)
    dp = len(per_replica(service.metrics(), "minisgl_requests_running"))
    schedulers = ["minisgl::scheduler"] if dp == 1 else [
        f"minisgl::scheduler-dp{i}" for i in range(dp)]
    assert titles == ["minisgl::detokenizer", *schedulers, "minisgl::tokenizer"]


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc (Linux)")
def test_text_workers_do_not_load_torch(service: RunningService) -> None:
    """The tokenizer and detokenizer need only `tokenizers` and jinja2: no libtorch mapped."""
    import psutil

    maps = {" ".join(psutil.Process(p).cmdline()).strip(): (
        Path(f"/proc/{p}/maps").read_text(), psutil.Process(p).memory_info().rss)
        for p in service.worker_pids}
    scheduler = next(name for name in maps if name.startswith("minisgl::scheduler"))
    assert "libtorch" in maps[scheduler][0]  # the check sees torch where it is
    for name in ("minisgl::tokenizer", "minisgl::detokenizer"):
        text, rss = maps[name]
        assert "libtorch" not in text, name
        assert rss < 250 * 2**20, f"{name}: {rss / 2**20:.0f} MiB"


def test_models_chat_and_completions(service: RunningService) -> None:
    client = OpenAI(base_url=f"{service.url}/v1", api_key="none")
    model = client.models.list().data[0].id
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=8,
        temperature=0, extra_body={"ignore_eos": True})
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None and chat.usage.completion_tokens == 8
    assert chat.usage.prompt_tokens > 0
    comp = client.completions.create(model=model, prompt=["one", "two three"], max_tokens=5,
                                     temperature=0, extra_body={"ignore_eos": True})
    assert len(comp.choices) == 2 and {c.index for c in comp.choices} == {0, 1}
    assert all(c.finish_reason == "length" for c in comp.choices)
    assert_idle(service)


def test_stream_equals_non_stream(service: RunningService) -> None:
    client = OpenAI(base_url=f"{service.url}/v1", api_key="none")
    model = service.model_name()
    kwargs = {"model": model, "max_tokens": 24, "temperature": 0,
              "messages": [{"role": "user", "content": "Tell me a story about 🐍 and 中文"}]}
    full = client.chat.completions.create(**kwargs).choices[0].message.content or ""
    chunks = list(client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert len(finals) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full
    assert "\ufffd" not in text or "\ufffd" in full
    assert chunks[-1].usage.completion_tokens == 24 or finals[0].choices[0].finish_reason == "stop"


def test_concurrent_requests_share_batches(service: RunningService) -> None:
    client = OpenAI(base_url=f"{service.url}/v1", api_key="none")
    model = service.model_name()
    steps_before = per_replica(service.metrics(), "minisgl_scheduler_steps_total")

    def ask(i: int) -> int:
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"{i}+{i}=?"}], max_tokens=256,
            temperature=0, extra_body={"ignore_eos": True})
        return r.usage.completion_tokens if r.usage else 0

    # the tiny model runs 256 steps in well under a second, less than eight client threads may
    # take to get their requests out on a loaded machine. With the scheduler frozen the eight
    # independent requests queue at it, as they would behind one long step of a real model.
    passed_on = service.metrics()["minisgl_tokenizer_requests_total"]
    with ThreadPoolExecutor(8) as ex:
        with service.paused("scheduler"):
            answers = ex.map(ask, range(8))
            # all eight are in the frozen scheduler's inbox once the tokenizer has passed them on
            service.wait_metrics(lambda m: m["minisgl_tokenizer_requests_total"] >= passed_on + 8,
                                 what="8 requests passed on to the scheduler")
        assert list(answers) == [256] * 8
    steps = max(after - before for after, before in zip(
        per_replica(service.metrics(), "minisgl_scheduler_steps_total"), steps_before,
        strict=True))
    # alone, one request takes 256 steps; 8 one after another would take 2048, and batched
    # ~256 plus the few steps it may take the stragglers to be admitted (on each replica)
    assert steps < 384, f"8 concurrent requests took {steps} engine steps: they were not batched"
    assert service.metrics()["minisgl_scheduler_batch_peak"] >= 2
    assert_idle(service)


def test_stream_disconnect_frees_pages(service: RunningService) -> None:
    body = {"model": service.model_name(), "max_tokens": 400, "stream": True,
            "messages": [{"role": "user", "content": "go"}], "ignore_eos": True}
    aborted = 'minisgl_requests_finished_total{reason="abort"}'
    finished = 'minisgl_requests_finished_total{reason="length"}'
    schedulers = service.replicas("scheduler")  # found now: freezing them must be immediate
    # 400 tokens take the tiny model about a second; frozen at the stream's first chunk, the
    # scheduler still holds the request's pages when the disconnect reaches it. On a loaded
    # host it can win the race and finish first: that try ends "length", and another is made.
    for _attempt in range(5):
        before = service.metrics()
        with httpx.stream("POST", f"{service.url}/v1/chat/completions", json=body,
                          timeout=60) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))  # the role chunk
            for scheduler in schedulers:
                scheduler.suspend()
            try:
                resp.close()
                service.wait_metrics(lambda m: m["minisgl_frontend_requests_inflight"] == 0,
                                     what="the frontend to drop the closed stream")
            finally:
                for scheduler in schedulers:
                    scheduler.resume()
        assert_idle(service)
        after = service.metrics()
        if after[aborted] == before[aborted] + 1:
            return
        assert after[finished] == before[finished] + 1, "the stream neither aborted nor ended"
    pytest.fail("the scheduler finished 400 tokens before it could be frozen, 5 times")


def test_mixed_requests_with_random_aborts(service: RunningService) -> None:
    rng = random.Random(7)
    model = service.model_name()
    plan = [(i, rng.random() < 1 / 3, rng.random() < 0.5, rng.randint(1, 6), rng.randint(4, 40))
            for i in range(100)]
    errors: list[str] = []
    lock = threading.Lock()

    def run(item: tuple[int, bool, bool, int, int]) -> None:
        i, abort, stream, cut, max_tokens = item
        body = {"model": model, "max_tokens": max_tokens, "stream": stream,
                "messages": [{"role": "user", "content": f"request {i} " * (i % 7 + 1)}]}
        try:
            if stream:
                with httpx.stream("POST", f"{service.url}/v1/chat/completions", json=body,
                                  timeout=60) as resp:
                    frames = 0
                    for line in resp.iter_lines():
                        if line.startswith("data: "):
                            frames += 1
                            if line != "data: [DONE]":
                                assert "error" not in json.loads(line[6:]), line
                        if abort and frames >= cut:
                            return
                    assert frames >= 2
            else:
                timeout = 0.05 * cut if abort else 60
                try:
                    r = httpx.post(f"{service.url}/v1/chat/completions", json=body,
                                   timeout=timeout)
                except httpx.TimeoutException:
                    assert abort
                    return
                assert r.status_code == 200, r.text
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            with lock:
                errors.append(f"request {i}: {exc!r}")

    with ThreadPoolExecutor(16) as ex:
        list(ex.map(run, plan))
    assert errors == []
    assert_idle(service)


def test_bad_requests_get_openai_errors(service: RunningService) -> None:
    url = f"{service.url}/v1/chat/completions"
    model = service.model_name()
    too_long = " ".join(["hello"] * 2000)
    r = httpx.post(url, json={"model": model, "messages": [{"role": "user", "content": too_long}]},
                   timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and "512" in err["message"]
    r = httpx.post(url, json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.post(url, json={"model": model, "messages": [{"role": "user", "content": "x"}],
                              "temperature": -1})
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    ok = httpx.post(url, json={"model": model, "max_tokens": 2,
                               "messages": [{"role": "user", "content": "x"}]}, timeout=30)
    assert ok.status_code == 200
    assert_idle(service)


@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_health_and_metrics_answer(service: RunningService, path: str) -> None:
    assert httpx.get(f"{service.url}{path}", timeout=5).status_code == 200


def test_return_token_ids(service: RunningService, tiny_model: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    body = {"model": service.model_name(), "prompt": "Once upon a time", "max_tokens": 12,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    full = httpx.post(f"{service.url}/v1/completions", json=body, timeout=60).json()
    (choice,) = full["choices"]
    ids = choice["token_ids"]
    assert len(ids) == full["usage"]["completion_tokens"] == 12
    assert tok.decode(ids) == choice["text"]
    streamed: list[int] = []
    with httpx.stream("POST", f"{service.url}/v1/completions", json={**body, "stream": True},
                      timeout=60) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                for c in json.loads(line[6:])["choices"]:
                    streamed += c.get("token_ids", [])
    assert streamed == ids
    chat = httpx.post(f"{service.url}/v1/chat/completions", timeout=60, json={
        "model": body["model"], "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5, "ignore_eos": True, "return_token_ids": True}).json()
    assert len(chat["choices"][0]["token_ids"]) == 5
    plain = httpx.post(f"{service.url}/v1/completions", timeout=60,
                       json={**body, "return_token_ids": False}).json()
    assert "token_ids" not in plain["choices"][0] and plain["choices"][0]["text"] == choice["text"]


def test_logit_bias_and_min_tokens_reach_the_engine(service: RunningService) -> None:
    def ids(**extra: object) -> tuple[list[int], str]:
        body = {"model": service.model_name(), "prompt": "Once upon a time", "max_tokens": 8,
                "temperature": 0, "return_token_ids": True, **extra}
        (choice,) = httpx.post(f"{service.url}/v1/completions", json=body,
                               timeout=60).json()["choices"]
        return choice["token_ids"], choice["finish_reason"]

    plain, _ = ids(ignore_eos=True)
    forced = (plain[0] + 1) % 100
    assert ids(ignore_eos=True, logit_bias={str(forced): 100}) == ([forced] * 8, "length")
    # the first greedy token as a stop token ends the request at once, unless min_tokens holds
    # it back (it is masked until 3 tokens exist)
    assert ids(stop_token_ids=[plain[0]]) == ([plain[0]], "stop")
    held, _ = ids(stop_token_ids=[plain[0]], min_tokens=3)
    assert len(held) >= 3 and plain[0] not in held[:3]


def test_logprobs_through_every_process(service: RunningService) -> None:
    client = OpenAI(base_url=f"{service.url}/v1", api_key="none")
    kwargs = {"model": service.model_name(), "messages": [{"role": "user", "content": "hi"}],
              "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 3,
              "extra_body": {"ignore_eos": True, "return_token_ids": True}}
    full = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    choice = full.choices[0]
    content = choice.logprobs.content
    assert len(content) == 6 == len(choice.token_ids)  # type: ignore[attr-defined]
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob) == (
            entry.token, entry.logprob)
    streamed = [e for c in client.chat.completions.create(stream=True, **kwargs)
                if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content or []]
    # the same tokens; values equal up to float noise (the repeat reuses the cached prompt)
    assert [e.token for e in streamed] == [e.token for e in content]
    assert [{t.token: t.logprob for t in e.top_logprobs} for e in streamed] == [
        pytest.approx({t.token: t.logprob for t in e.top_logprobs}, abs=1e-4) for e in content]
