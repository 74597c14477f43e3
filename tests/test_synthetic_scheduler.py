"""The synthetic scheduler: deterministic echo, its options, and a service that runs on it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from minisgl_core.default_plugins.synthetic import SyntheticScheduler, check_options
from minisgl_core.testing.service import launch_service
from minisgl_core.wire.schema import SamplingParams


def run(role: SyntheticScheduler) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for _ in range(1000):
        if not role.has_work():
            return out
        for r in role.step():
            out.setdefault(r.request_id, []).extend(r.token_ids)
    raise AssertionError("still busy")


def test_it_echoes_the_prompt_and_honours_eos_after_min_tokens() -> None:
    role = SyntheticScheduler(vocab_size=100, max_seq_len=64, eos_token_ids=frozenset({9}))
    role.add_request("echo", (3, 4, 5), SamplingParams(max_tokens=7))
    role.add_request("eos", (3, 9, 5), SamplingParams(max_tokens=7))
    role.add_request("late", (3, 9, 5), SamplingParams(max_tokens=7, min_tokens=3))
    role.add_request("ignored", (3, 9, 5), SamplingParams(max_tokens=4, ignore_eos=True))
    assert run(role) == {"echo": [3, 4, 5, 3, 4, 5, 3], "eos": [3, 9], "late": [3, 9, 5, 3, 9],
                         "ignored": [3, 9, 5, 3]}
    assert role.stats().pages_free == role.stats().pages_total


def test_pages_limit_admission() -> None:
    # each request needs ceil((4 + 8 - 1) / 4) = 3 pages; 7 pages run two at a time
    role = SyntheticScheduler(vocab_size=100, max_seq_len=64, num_pages=7, page_size=4)
    for i in range(3):
        role.add_request(f"r{i}", (1, 2, 3, 4), SamplingParams(max_tokens=8))
    role.step()
    stats = role.stats()
    assert (stats.running, stats.waiting, stats.pages_free) == (2, 1, 1)
    assert set(run(role)) == {"r0", "r1", "r2"}


@pytest.mark.parametrize(("options", "message"), [
    ({"tokens_per_s": 0}, "tokens_per_s must be > 0"),
    ({"tokens_per_s": "fast"}, "tokens_per_s must be a number"),
    ({"tokens_per_sec": 5}, "unknown option 'tokens_per_sec' in [roles.scheduler.synthetic]"),
])
def test_bad_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        SyntheticScheduler(vocab_size=10, max_seq_len=10, tokens_per_s=check_options(options))
    assert message in str(info.value)


def test_a_service_on_the_synthetic_scheduler(tmp_path: Path) -> None:
    from minisgl_core.testing.tiny import make_tiny_model

    model = str(make_tiny_model(tmp_path / "tiny", "llama"))
    # 20 tokens/s per request: a 400-token stream is still running when it is dropped; no
    # transport or frontend named: the ones the installed plugins offer (zmq, openai)
    svc = launch_service(model, transport=None, frontend=None, log_dir=tmp_path, args=[
        "--scheduler", "synthetic", "-s", "roles.scheduler.synthetic.tokens_per_s=20",
        "--num-pages", "64", "--page-size", "16", "--max-seq-len-override", "512"])
    try:
        prompt = [5, 6, 7]
        done = httpx.post(f"{svc.url}/v1/completions", timeout=30, json={
            "model": svc.model_name(), "prompt": prompt, "max_tokens": 5,
            "return_token_ids": True}).json()["choices"][0]
        assert done["token_ids"] == [5, 6, 7, 5, 6] and done["finish_reason"] == "length"
        body = {"model": svc.model_name(), "prompt": prompt, "max_tokens": 400, "stream": True}
        with httpx.stream("POST", f"{svc.url}/v1/completions", json=body, timeout=30) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()  # kept: breaking out of it would close the stream
            for _ in zip(range(5), lines, strict=False):
                pass
            held = svc.wait_metrics(lambda m: m["minisgl_requests_running"] == 1,
                                    what="the 400-token stream running")
            # it reserved ceil((3 + 400 - 1) / 16) = 26 of the 64 pages
            assert held["minisgl_kv_pages_free"] == held["minisgl_kv_pages_total"] - 26
        idle = svc.wait_metrics(lambda m: m["minisgl_requests_running"] == 0
                                and m["minisgl_kv_pages_free"] == 64,
                                what="the dropped stream aborted, its pages free")
        assert idle["minisgl_kv_pages_free"] == idle["minisgl_kv_pages_total"] == 64
        assert idle['minisgl_requests_finished_total{reason="abort"}'] == 1
        assert "transport zmq | frontend openai |" in svc.log()
    finally:
        svc.stop()
        assert not svc.leftover_workers()
