"""The default model served end to end: real answers, real multi-byte text in the stream."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import OpenAI

from minisgl_core.testing.service import launch_service

pytestmark = pytest.mark.model


def test_default_model_answers_and_streams_multibyte_text(tmp_path: Path) -> None:
    from minisgl_core.plugin.model_lookup import resolve

    # one scheduler thread: two OpenMP threads crawl when other processes hold the cores
    svc = launch_service(resolve(None).path, transport="zmq", args=("-s", "num_threads=1"),
                         log_dir=tmp_path)
    try:
        client = OpenAI(base_url=f"{svc.url}/v1", api_key="none")
        model = client.models.list().data[0].id
        paris = client.chat.completions.create(
            model=model, max_tokens=16, temperature=0,
            messages=[{"role": "user", "content": "The capital of France is? Answer in one word."}])
        assert "Paris" in (paris.choices[0].message.content or "")
        kwargs = {"model": model, "max_tokens": 48, "temperature": 0, "messages": [{
            "role": "user", "content": "Say hello in Chinese (你好) and add three emoji like 😀."}]}
        full = client.chat.completions.create(**kwargs).choices[0].message.content or ""
        pieces = [c.choices[0].delta.content or "" for c in
                  client.chat.completions.create(**kwargs, stream=True) if c.choices]
        assert "".join(pieces) == full
        assert any(ord(ch) > 0x2E80 for ch in full), full  # CJK or emoji really came out
        assert all("\ufffd" not in p for p in pieces)
    finally:
        svc.stop()
        assert not svc.leftover_workers()
