"""/tokenize and /detokenize go to the tokenizer process (EngineClient.tokenize), and the launcher
stays light: after them, the page and a tools request it maps no tokenizer and no torch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from minisgl_core.testing.service import RunningService, launch_service

ARGS = ["--scheduler", "synthetic", "--max-seq-len-override", "512"]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.fixture(scope="module", params=["zmq", "inproc"])
def service(request: pytest.FixtureRequest, tiny_model: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    svc = launch_service(tiny_model, transport=request.param, args=ARGS,
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


def post(service: RunningService, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{service.url}{path}", json=body, timeout=60)


def test_tokenize_is_the_models_tokenizer(service: RunningService, tiny_model: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    r = post(service, "/tokenize", {"prompt": "Hello world!", "return_token_strs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == tok.encode("Hello world!") and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == 512
    assert body["token_strs"] == tok.convert_ids_to_tokens(body["tokens"])
    back = post(service, "/detokenize", {"tokens": body["tokens"]})
    assert back.status_code == 200 and back.json() == {"prompt": tok.decode(body["tokens"])}


def test_tokenize_chat_is_the_prompt_a_chat_completion_sends(service: RunningService,
                                                             tiny_model: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    r = post(service, "/tokenize", {"messages": MESSAGES})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == tok.encode(text, add_special_tokens=False)
    bare = post(service, "/tokenize", {"messages": MESSAGES, "add_generation_prompt": False})
    assert bare.json()["count"] < r.json()["count"]
    chat = post(service, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1})
    assert chat.json()["usage"]["prompt_tokens"] == r.json()["count"]
    with_tools = post(service, "/tokenize", {"messages": MESSAGES, "tools": [TOOL]})
    assert with_tools.json()["count"] > r.json()["count"]


def test_the_tokenizer_says_no_as_every_check(service: RunningService) -> None:
    r = post(service, "/detokenize", {"tokens": [1, 10**6]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"
    r = post(service, "/tokenize", {"messages": [{"role": "tool", "content": "x"}],
                                    "tools": "not a list"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools"


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc (Linux)")
def test_the_launcher_loads_no_tokenizer(service: RunningService, request: pytest.FixtureRequest
                                         ) -> None:
    import psutil

    if "inproc" in request.node.callspec.id:
        pytest.skip("inproc runs the tokenizer in the launcher's process")
    post(service, "/tokenize", {"messages": MESSAGES, "tools": [TOOL]})
    post(service, "/detokenize", {"tokens": [1, 2]})
    assert httpx.get(f"{service.url}/", timeout=60).status_code == 200
    info = httpx.get(f"{service.url}/v1/engine/info", timeout=60).json()
    rows = {p["name"]: p for p in info["plugins"]}  # the launcher's own plugin listing
    assert rows["frontend_openai"]["status"] == "ok" and "core" in rows
    tools = post(service, "/v1/chat/completions", {"messages": MESSAGES, "tools": [TOOL],
                                                   "tool_choice": "required", "max_tokens": 8})
    assert tools.status_code == 200, tools.text
    maps = Path(f"/proc/{service.proc.pid}/maps").read_text()
    assert "libtorch" not in maps and "/tokenizers/" not in maps
    rss = psutil.Process(service.proc.pid).memory_info().rss
    assert rss < 200 * 2**20, f"the launcher holds {rss / 2**20:.0f} MiB"
