"""Security defaults: loopback only, the API key on every /v1 route, a private run dir, no
pickle or eval of received data, request size limits, errors that do not echo inputs."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import httpx
import psutil
import pytest
from reliability_support import API_KEY, AUTH, ServicePool

from minisgl_core.config.launch import LaunchConfig

ROOT = Path(__file__).resolve().parents[2]
V1_ROUTES = [("GET", "/v1/models"), ("GET", "/v1/models/tiny-llama"),
             ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
             ("GET", "/v1/engine/stats"), ("GET", "/v1/engine/info"),
             ("GET", "/v1/no-such-route"), ("DELETE", "/v1/models")]
# calls that turn received bytes into objects or code; none may appear in shipped code
UNSAFE = re.compile(r"\bpickle\.loads?\(|\bcPickle\b|\bdill\b|\bcloudpickle\b|\bmarshal\.loads?\("
                    r"|\bshelve\b|(?<![\w.])eval\(|(?<![\w.])exec\(|\byaml\.(unsafe_)?load\("
                    r"|recv_pyobj|\bjsonpickle\b|torch\.load\((?![^)]*weights_only=True)")


def test_default_host_is_loopback() -> None:
    from minisgl_frontend_grpc.server import check_options as grpc_options
    from minisgl_frontend_openai.server import check_options as openai_options

    # each frontend's own default, with nothing configured
    assert openai_options(LaunchConfig().frontend_table("openai"))["host"] == "127.0.0.1"
    assert grpc_options(LaunchConfig().frontend_table("grpc"))["host"] == "127.0.0.1"


@pytest.mark.parametrize("transport", ["zmq", "nng"])
def test_listens_on_loopback_only_and_workers_listen_nowhere(pool: ServicePool,
                                                             transport: str) -> None:
    svc = pool.get(transport)
    listening = [c.laddr for c in psutil.Process(svc.pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
    for role, proc in svc.workers().items():  # workers talk over ipc only: no tcp by default
        inet = proc.net_connections(kind="inet")
        assert not inet, f"{role} has inet sockets: {inet}"


@pytest.mark.parametrize("transport", ["zmq", "nng"])
def test_run_dir_is_private(pool: ServicePool, transport: str) -> None:
    svc = pool.get(transport)
    mode = stat.S_IMODE(svc.run_dir.stat().st_mode)
    assert mode == 0o700, oct(mode)
    names = sorted(p.name for p in svc.run_dir.iterdir())
    assert {"tokenizer", "scheduler", "detokenizer", "control"} <= set(names), names


@pytest.mark.parametrize("transport", ["zmq", "nng"])
@pytest.mark.parametrize("method, path", V1_ROUTES)
def test_every_v1_route_needs_the_key(pool: ServicePool, transport: str, method: str,
                                      path: str) -> None:
    svc = pool.get(transport)
    url = f"{svc.url}{path}"
    body = b'{"prompt": "x", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}'
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY},
                    {"Authorization": f"Basic {API_KEY}"}, {"X-API-Key": "wrong"},
                    {"X-API-Key": f"Bearer {API_KEY}"}):
        resp = httpx.request(method, url, headers=headers, content=body, timeout=30)
        assert resp.status_code == 401, (headers, resp.status_code, resp.text[:200])
        assert resp.json()["error"]["code"] == "invalid_api_key"
        assert API_KEY not in resp.text
    for good in (AUTH, {"X-API-Key": API_KEY}):  # a bearer token, or Anthropic's header
        resp = httpx.request(method, url, headers=good, content=body, timeout=30)
        assert resp.status_code != 401, resp.text[:200]


@pytest.mark.parametrize("transport, metrics_open", [("zmq", True), ("nng", False)])
def test_health_open_metrics_configurable(pool: ServicePool, transport: str,
                                          metrics_open: bool) -> None:
    svc = pool.get(transport)
    assert httpx.get(f"{svc.url}/health", timeout=10).status_code == 200
    bare = httpx.get(f"{svc.url}/metrics", timeout=10).status_code
    assert bare == (200 if metrics_open else 401)
    assert httpx.get(f"{svc.url}/metrics", headers=AUTH, timeout=10).status_code == 200


def test_key_compared_in_constant_time() -> None:
    source = (ROOT / "plugins/frontend_openai/minisgl_frontend_openai/middleware.py").read_text()
    assert "hmac.compare_digest(" in source


def test_key_never_logged(pool: ServicePool) -> None:
    for transport in ("zmq", "nng"):
        assert API_KEY not in pool.get(transport).log()


def test_no_pickle_or_eval_in_shipped_code() -> None:
    found = []
    for base in ("minisgl_core", "plugins"):
        for path in sorted((ROOT / base).rglob("*.py")):
            if "/tests/" in str(path) or "_pb2" in path.name:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if UNSAFE.search(code):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_body_size_limit(pool: ServicePool) -> None:
    svc = pool.get("zmq")
    big = b'{"prompt": "' + b"a" * (5 * 2**20) + b'"}'
    url = f"{svc.url}/v1/completions"
    headers = {**AUTH, "content-type": "application/json"}
    resp = httpx.post(url, content=big, headers=headers, timeout=30)
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"

    def chunks() -> object:  # no content-length: the limit must hold while reading
        for i in range(0, len(big), 2**16):
            yield big[i:i + 2**16]

    try:
        resp = httpx.post(url, content=chunks(), headers=headers, timeout=30)
        assert resp.status_code == 413, resp.text[:200]
    except httpx.WriteError:
        pass  # the server answered 413 and closed while we were still sending: also a refusal
    assert httpx.post(url, json={"prompt": "ok", "max_tokens": 1}, headers=AUTH,
                      timeout=30).status_code == 200


def test_errors_do_not_echo_inputs(pool: ServicePool) -> None:
    svc = pool.get("zmq")
    secret = "S3cr3t-" * 2000
    bodies = [
        ("/v1/chat/completions", {"model": secret, "messages": [{"role": "user",
                                                                 "content": "x"}]}),
        ("/v1/chat/completions", {"messages": [{"role": secret, "content": "x"}]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": secret}]}]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": secret * 3}]}),
        ("/v1/completions", {"prompt": secret, "max_tokens": secret}),
        ("/v1/completions", {"prompt": [secret, 5]}),
        ("/v1/completions", {"prompt": "x", "stop": [secret] * 40}),
        ("/v1/completions", {"prompt": "x", secret: 1, "logit_bias": {secret: 1}}),
    ]
    for path, body in bodies:
        resp = svc.post(path, body)
        assert 400 <= resp.status_code < 500, resp.text[:300]
        assert secret[:200] not in resp.text and len(resp.text) < 1500, resp.text[:300]


def test_config_show_redacts_the_api_key() -> None:
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "minisgl_core", "config", "show"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MINISGL_API_KEY": API_KEY}).stdout
    assert "api_key" in out and API_KEY not in out
