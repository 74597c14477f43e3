"""The page in a real headless Chromium against a real service (tiny model, API key on).

Needs Debian's ``chromium`` (``.ci/run`` installs it) and the ``playwright`` package, which
drives that browser; without either, these tests are skipped and say why. Screenshots of each
view go to ``$MINISGL_UI_SCREENSHOTS`` (``docs/images`` to refresh the README's) or a temp dir;
``MINISGL_UI_MODEL=default`` runs them on the default model instead of the tiny random one.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service

KEY = "sk-ui-test"
ARGS = ["--max-seq-len-override", "512", "--num-pages", "256", "--page-size", "16",
        "--api-key", KEY]
# the default model on a busy CPU makes a few tokens a second: give it the time it needs
WAIT_MS = 600_000 if os.environ.get("MINISGL_UI_MODEL") else 60_000
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> str | None:
    """The system Chromium (``$MINISGL_CHROMIUM`` first), or None."""
    for name in (os.environ.get("MINISGL_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        pytest.skip("no browser: the page tests need Debian's chromium "
                    "(apt-get install chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="no browser driver: pip install playwright")
    with sync_api.sync_playwright() as pw:
        # --no-sandbox: CI containers run as root, where Chromium's sandbox cannot start
        b = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def service(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    from minisgl_core.testing.tiny import make_tiny_model

    # MINISGL_UI_MODEL=default serves the real default model (for screenshots worth reading)
    model = os.environ.get("MINISGL_UI_MODEL") or str(
        make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama"))
    svc = launch_service(model, args=ARGS, log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()
        assert not svc.leftover_workers()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = os.environ.get("MINISGL_UI_SCREENSHOTS")
    path = Path(out) if out else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_name(service: RunningService) -> str:
    r = httpx.get(f"{service.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    return str(r.json()["data"][0]["id"])


def open_page(browser: Any, service: RunningService, viewport: dict[str, int]) -> Any:
    """A fresh page at ``/`` with the API key entered in the form it shows."""
    page = browser.new_page(viewport=viewport)
    page.errors = errors = []  # uncaught exceptions and policy violations: there must be none
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    page.goto(service.url + "/")
    page.wait_for_selector("#key-panel:not([hidden])", timeout=10_000)  # the 401 asked for it
    page.fill("#key-input", KEY)
    page.press("#key-input", "Enter")
    page.wait_for_function("(m) => document.getElementById('model-name').textContent === m",
                           arg=model_name(service), timeout=10_000)
    assert page.is_hidden("#key-panel")
    return page


LAST = "[...document.querySelectorAll('.msg.assistant')].pop()"


def send(page: Any, prompt: str, *, max_tokens: int) -> None:
    page.fill("#temperature", "1")
    page.fill("#max_tokens", str(max_tokens))
    if not page.is_visible("#extra"):
        page.click("#advanced > summary")
    # the random tiny model may end at once, and greedy it repeats one newline
    page.fill("#extra", json.dumps({"ignore_eos": True, "seed": 7}))
    page.fill("#prompt", prompt)
    page.press("#prompt", "Enter")


def test_chat_streams_an_answer(browser: Any, service: RunningService, shots: Path) -> None:
    page = open_page(browser, service, DESKTOP)
    # record every length the answer's text goes through, as the DOM changes
    page.evaluate("""() => {
        window.__lengths = [];
        new MutationObserver(() => {
            const last = [...document.querySelectorAll('.msg.assistant .content')].pop();
            if (last) window.__lengths.push(last.textContent.length);
        }).observe(document.getElementById('messages'),
                   {childList: true, subtree: true, characterData: true});
    }""")
    send(page, "Once upon a time", max_tokens=48)
    page.wait_for_function(f"() => {LAST}?.dataset.state === 'done'", timeout=WAIT_MS)
    lengths = [n for n in page.evaluate("window.__lengths") if n > 0]
    assert len(set(lengths)) >= 3 and lengths == sorted(lengths), lengths  # it grew, piece by piece
    meta = page.inner_text(".msg.assistant .meta")
    assert meta.startswith("48 tokens") and "TTFT" in meta and "finish: length" in meta
    text = page.inner_text(".msg.assistant .content")
    assert len(text) == lengths[-1]
    send(page, "And then?", max_tokens=16)  # the second turn carries the first
    page.wait_for_function(f"() => document.querySelectorAll('.msg.assistant').length === 2 "
                           f"&& {LAST}.dataset.state === 'done'", timeout=WAIT_MS)
    page.screenshot(path=str(shots / "ui-chat.png"))
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(shots / "ui-chat-phone.png"))
    assert page.errors == []
    page.close()


def test_bad_input_shows_the_error(browser: Any, service: RunningService) -> None:
    page = open_page(browser, service, DESKTOP)
    before = service.metrics()
    send(page, "hello", max_tokens=100_000)  # past the context: the server's 400
    page.wait_for_function(f"() => {LAST}?.dataset.state === 'error'", timeout=WAIT_MS)
    assert "maximum context length" in page.inner_text(".msg.assistant .content")
    page.fill("#extra", "{not json")  # refused in the page: nothing is sent
    page.fill("#prompt", "hello again")
    page.press("#prompt", "Enter")
    page.wait_for_function("() => document.querySelectorAll('.msg.assistant').length === 2 "
                           f"&& {LAST}.dataset.state === 'error'", timeout=10_000)
    assert page.evaluate(f"() => {LAST}.textContent").startswith("Extra fields is not valid JSON")
    after = service.metrics()
    assert after["minisgl_requests_running"] == 0 and after["minisgl_requests_waiting"] == 0
    assert after["minisgl_kv_pages_free"] == after["minisgl_kv_pages_total"]
    assert after["minisgl_frontend_requests_inflight"] == 0
    # refused before reaching the engine: nothing was generated for either
    assert after["minisgl_generation_tokens_total"] == before["minisgl_generation_tokens_total"]
    assert page.is_visible("#send") and page.errors == []
    page.close()


# Armed before a send: the page presses its own Stop button at the answer's first text. A poll
# from the test can miss the whole stream (the tiny model's 400 tokens may arrive, and end,
# between two polls); an observer runs at each change of the page, before the next chunk.
STOP_AT_FIRST_TEXT = """() => {
    window.__stopWasShown = null;
    const watch = new MutationObserver(() => {
        const last = [...document.querySelectorAll('.msg.assistant')].pop();
        if (last?.dataset.state !== 'streaming' || !last.querySelector('.content').textContent)
            return;
        watch.disconnect();
        const stop = document.getElementById('stop');
        window.__stopWasShown = !stop.hidden;
        stop.click();
    });
    watch.observe(document.getElementById('messages'),
                  {childList: true, subtree: true, characterData: true});
}"""
ABORT = 'minisgl_requests_finished_total{reason="abort"}'
LENGTH = 'minisgl_requests_finished_total{reason="length"}'


def test_stop_returns_the_pages(browser: Any, service: RunningService) -> None:
    page = open_page(browser, service, DESKTOP)
    total = service.metrics()["minisgl_kv_pages_total"]
    # the page stops at once, but the scheduler may still finish all 400 tokens before the
    # disconnect reaches it (then it ends "length"), and on a busy host the whole answer may reach
    # the page in one read, before it can stop (then it shows "done"): another answer is asked
    # for, up to 5
    for attempt in range(5):
        if attempt:  # a new chat: the last answer's 400 tokens would not fit the context again
            page.close()
            page = open_page(browser, service, DESKTOP)
        before = service.metrics()
        answers = page.evaluate("() => document.querySelectorAll('.msg.assistant').length")
        page.evaluate(STOP_AT_FIRST_TEXT)
        send(page, "Tell me a very long story", max_tokens=400)
        page.wait_for_function(f"() => document.querySelectorAll('.msg.assistant').length > "
                               f"{answers} && {LAST}.dataset.state !== 'streaming'",
                               timeout=WAIT_MS)
        state = page.evaluate(f"() => {LAST}.dataset.state")
        assert state in ("stopped", "done"), page.evaluate(
            f"() => {LAST}.textContent")  # an error's message, if that is what it shows
        if state == "stopped":
            assert page.evaluate("() => window.__stopWasShown") is True  # shown while streaming
            assert "stopped" in page.evaluate(
                f"() => {LAST}.querySelector('.meta').textContent")
        assert page.is_visible("#send") and page.is_hidden("#stop")
        after = service.wait_metrics(
            lambda m, b=before: m.get(ABORT, 0) + m.get(LENGTH, 0)
            > b.get(ABORT, 0) + b.get(LENGTH, 0)
            and m["minisgl_kv_pages_free"] == total and m["minisgl_requests_running"] == 0,
            what="the stopped answer ended, its pages free")
        if state == "stopped" and after.get(ABORT, 0) > before.get(ABORT, 0):
            break
    else:
        pytest.fail("in 5 answers no stop reached the scheduler before the answer's end")
    assert after[ABORT] == before.get(ABORT, 0) + 1
    assert after.get("minisgl_scheduler_finished_abort_total") \
        == before.get("minisgl_scheduler_finished_abort_total", 0) + 1
    assert page.errors == []
    page.close()


def _load(url: str, stop: threading.Event, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "Count to a hundred"}],
            "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {KEY}"}) as client:
        for _ in range(200):  # bounded; stops as soon as the test has seen the load
            if stop.is_set():
                return
            with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
                for _ in r.iter_lines():
                    if stop.is_set():
                        return


SUMMARY = "(id) => JSON.parse(document.getElementById(id).dataset.summary || '{}')"


def test_dashboard_shows_the_load(browser: Any, service: RunningService, shots: Path) -> None:
    page = open_page(browser, service, DESKTOP)
    page.click("#tab-dashboard")
    page.wait_for_selector("#served dd", timeout=10_000)
    served = page.inner_text("#served")
    assert model_name(service) in served and "zmq" in served and "openai" in served
    info = httpx.get(f"{service.url}/v1/engine/info",
                     headers={"Authorization": f"Bearer {KEY}"}).json()
    assert ("quantization" in served) == ("quantization" in info)  # shown only when configured
    assert ("MB of them in huge pages" in served) == ("weight_bytes" in info)  # an engine's
    assert "frontend_openai" in page.inner_text("#plugins")
    stop = threading.Event()
    model = model_name(service)
    loaders = [threading.Thread(target=_load, args=(service.url, stop, model)) for _ in range(4)]
    for t in loaders:
        t.start()
    try:
        page.wait_for_function(
            f"() => {{ const s = ({SUMMARY})('chart-tps'); "
            "return s.output && s.output.max > 0 && s.output.count >= 8; }", timeout=WAIT_MS)
        tps = float(page.inner_text("#stat-tps"))
        assert tps > 0, tps
        summary = page.evaluate(f"() => ({SUMMARY})('chart-requests')")
        assert summary["running"]["max"] >= 1
        kv = page.evaluate(f"() => ({SUMMARY})('chart-kv')")
        assert kv["in use"]["max"] > 0
        page.screenshot(path=str(shots / "ui-dashboard.png"))
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(1500)  # one more refresh at the new size
        page.screenshot(path=str(shots / "ui-dashboard-phone.png"), full_page=True)
    finally:
        stop.set()
        for t in loaders:
            t.join(60)
    assert page.errors == []
    page.close()
