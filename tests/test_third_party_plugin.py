"""The example third-party plugin, installed as a real distribution, found through its entry point.

``make setup`` installs examples/third_party_plugin; if it is missing, the module fixture installs
it (editable, into this interpreter's environment) first.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "third_party_plugin"
DIST = "minisgl-transport-loopback"


@pytest.fixture(scope="module")
def installed() -> metadata.Distribution:
    try:
        return metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        pass
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(EXAMPLE)]
    if importlib.util.find_spec("setuptools") is not None:
        cmd.insert(-2, "--no-build-isolation")  # offline-friendly: build with what is here
    subprocess.run(cmd, check=True, timeout=600)
    importlib.invalidate_caches()
    return metadata.distribution(DIST)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()  # the suite's eager default stays
           if k == "MINISGL_COMPILE" or not k.startswith("MINISGL_")}
    return {**env, **extra}


def test_its_entry_point_is_in_the_minisgl_group(installed: metadata.Distribution) -> None:
    eps = [ep for ep in installed.entry_points if ep.group == "minisgl"]
    assert [(ep.name, ep.value) for ep in eps] == [("transport_loopback",
                                                    "minisgl_transport_loopback")]


def test_minisgl_plugins_lists_it(installed: metadata.Distribution) -> None:
    out = subprocess.run([sys.executable, "-m", "minisgl_core", "plugins", "--json"],
                         capture_output=True, text=True, timeout=120,
                         env=_env(MINISGL_LOAD_PLUGINS="transport_loopback,transport_zmq"))
    assert out.returncode == 0, out.stderr
    rows = {row["name"]: row for row in json.loads(out.stdout)}
    row = rows["transport_loopback"]
    assert row["dist"] == DIST and row["version"] == installed.version
    assert row["provides"] == ["transport:loopback", "frontend:lines",
                               "role:tokenizer:shout"] and row["status"] == "ok"
    assert "zmq" not in out.stderr  # nothing complained


def test_the_contract_passes_when_found_through_the_entry_point(
        installed: metadata.Distribution, tmp_path: Path) -> None:
    # plugins = None: the suite loads installed entry points, as a user's environment would.
    (tmp_path / "test_found.py").write_text(
        "from minisgl_core.testing import TransportContract\n\n"
        "class TestLoopbackFound(TransportContract):\n"
        "    transport = 'loopback'\n"
        "    plugins = None\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), "-c", str(tmp_path / "pytest.ini"), str(tmp_path / "test_found.py"),
         "-k", "round_trip or fan_in_from_processes or second_bind or blocks"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=_env(MINISGL_LOAD_PLUGINS="transport_loopback,transport_zmq",
                 MINISGL_STRICT_PLUGINS="1"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_its_transport_frontend_and_role_serve_together(
        installed: metadata.Distribution, tmp_path: Path) -> None:
    import socket

    import httpx

    from minisgl_core.service.ports import free_port
    from minisgl_core.testing.service import launch_service
    from minisgl_core.testing.tiny import make_tiny_model

    model = str(make_tiny_model(tmp_path / "tiny", "llama"))
    lines_port = free_port()
    svc = launch_service(model, transport="loopback", frontend="openai,lines", log_dir=tmp_path,
                         args=["--tokenizer", "shout", "--scheduler", "synthetic",
                               "-s", f"frontends.lines.port={lines_port}",
                               "-s", "frontends.lines.max_tokens=40"],
                         env={"MINISGL_LOAD_PLUGINS": "transport_loopback,transport_zmq,"
                                                      "frontend_openai"})
    try:
        # the synthetic scheduler echoes the prompt's tokens: what shout made of it shows
        with socket.create_connection(("127.0.0.1", lines_port), timeout=30) as conn:
            conn.sendall(b"hello world\nsay it again\n")
            answers = conn.makefile("r", encoding="utf-8")
            first, second = json.loads(answers.readline()), json.loads(answers.readline())
        assert first.startswith("HELLO WORLD") and second.startswith("SAY IT AGAIN")
        beside = httpx.post(f"{svc.url}/v1/completions", timeout=30, json={
            "model": svc.model_name(), "prompt": "quiet please", "max_tokens": 16}).json()
        assert beside["choices"][0]["text"].startswith("QUIET")
        assert "transport loopback | frontend openai,lines" in svc.log()
    finally:
        assert svc.stop() == 0
        assert not svc.leftover_workers()
