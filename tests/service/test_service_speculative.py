"""`minisgl launch --speculative ngram`: /metrics counts drafts and accepted tokens, and greedy
answers (streamed or not) equal those of a service without speculation."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service

from .conftest import SERVICE_ARGS

REPEATING = [5, 6, 7, 8, 9, 10, 11, 12] * 4  # token ids: the answer continues the pattern
PROMPTS = [REPEATING, list(range(40, 72)), "Once upon a time there was a"]
DRAFTED, ACCEPTED = "minisgl_spec_draft_tokens_total", "minisgl_spec_accepted_tokens_total"


@pytest.fixture(scope="module")
def services(tiny_model: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RunningService]]:
    """The tiny model served twice: without speculation and with ``--speculative ngram``."""
    started: dict[str, RunningService] = {}
    try:
        for name, extra in (("plain", []), ("ngram", ["--speculative", "ngram"])):
            started[name] = launch_service(tiny_model, args=[*SERVICE_ARGS, *extra],
                                           log_dir=tmp_path_factory.mktemp("logs"))
        yield started
    finally:
        for svc in started.values():
            svc.stop()
            assert not svc.leftover_workers(), f"orphan workers:\n{svc.log()[-2000:]}"


def _body(svc: RunningService, prompt: list[int] | str, **kw: object) -> dict[str, object]:
    return {"model": svc.model_name(), "prompt": prompt, "max_tokens": 32, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, **kw}


def _complete(svc: RunningService, prompt: list[int] | str) -> list[int]:
    r = httpx.post(f"{svc.url}/v1/completions", json=_body(svc, prompt), timeout=120)
    assert r.status_code == 200, r.text
    return list(r.json()["choices"][0]["token_ids"])


def _stream(svc: RunningService, prompt: list[int] | str) -> tuple[list[int], str]:
    ids: list[int] = []
    text = ""
    with httpx.stream("POST", f"{svc.url}/v1/completions", timeout=120,
                      json=_body(svc, prompt, stream=True)) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                for c in json.loads(line[6:])["choices"]:
                    ids += c.get("token_ids", [])
                    text += c.get("text", "")
    return ids, text


def test_a_repeating_answer_raises_the_draft_counters(services: dict[str, RunningService]
                                                       ) -> None:
    svc = services["ngram"]
    before = svc.metrics()
    assert len(_complete(svc, REPEATING)) == 32
    after = svc.wait_metrics(
        lambda m: m.get(ACCEPTED, 0) > before.get(ACCEPTED, 0), timeout=120,
        what="the accepted-draft counter to rise after a repeating answer")
    drafted = after[DRAFTED] - before.get(DRAFTED, 0)
    accepted = after[ACCEPTED] - before.get(ACCEPTED, 0)
    assert drafted >= accepted > 0
    plain = services["plain"].metrics()
    assert plain.get(DRAFTED, 0) == plain.get(ACCEPTED, 0) == 0  # off by default


@pytest.mark.parametrize("prompt", PROMPTS, ids=["repeating", "non-repeating", "text"])
def test_greedy_streams_equal_plain_answers(services: dict[str, RunningService],
                                            prompt: list[int] | str) -> None:
    want = _complete(services["plain"], prompt)
    ids, text = _stream(services["ngram"], prompt)
    assert ids == want
    assert _complete(services["ngram"], prompt) == want
    assert text == _stream(services["plain"], prompt)[1]
