"""The installed ``minisgl`` command in real subprocesses, with the plugins installed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from minisgl_core.testing.fixtures import write_plugin_dist

HEAVY = ("torch", "transformers", "zmq", "pynng", "fastapi", "grpc")
FIRST_PARTY = ("core", "transport_zmq", "transport_nng", "frontend_openai", "frontend_grpc")
SCRIPT = Path(sys.executable).with_name("minisgl")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()  # the suite's eager default stays
           if k == "MINISGL_COMPILE" or not k.startswith("MINISGL_")}
    env.update(extra)
    return env


def minisgl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "minisgl_core"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120,
                          env=clean_env() if env is None else env)


@pytest.mark.parametrize("argv", [["--help"], ["plugins"], ["plugins", "--json"], ["--version"]])
def test_help_and_plugins_import_no_heavy_library(argv: list[str]) -> None:
    code = textwrap.dedent(
        f"""
        import json, sys
        from minisgl_core.cli.app import main
        try:
            main({argv!r})
        except SystemExit as exit:
            code = exit.code
        heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
        print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=clean_env())
    report = json.loads(out.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, out.stderr


def test_launch_unknown_transport_exits_2_with_installed_names() -> None:
    out = minisgl("launch", "--transport", "zmqq")
    assert out.returncode == 2, out.stderr
    assert 'did you mean "zmq"?' in out.stderr
    installed = out.stderr.split("installed: ", 1)[1].strip().split(", ")
    assert {"inproc", "zmq", "nng"} <= set(installed)


def test_plugins_check_lists_every_first_party_plugin_ok() -> None:
    out = minisgl("plugins", "--check", "--json")
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    for name in FIRST_PARTY:
        assert rows.get(name, {}).get("status") == "ok", (name, rows.get(name), out.stderr)
    assert out.returncode == 0
    assert "transport:zmq" in rows["transport_zmq"]["provides"]
    assert "transport:nng" in rows["transport_nng"]["provides"]
    assert rows["transport_zmq"]["dist"] == "minisgl-transport-zmq"


@pytest.fixture
def broken_site(tmp_path: Path) -> Path:
    return write_plugin_dist(tmp_path, "acme-broken", {"acme_broken": "acme_broken"},
                             {"acme_broken.py": 'raise ImportError("libacme.so missing")\n'})


def test_broken_entry_point_is_listed_and_skipped(broken_site: Path) -> None:
    env = clean_env(PYTHONPATH=str(broken_site))
    out = minisgl("plugins", env=env)
    assert out.returncode == 0
    assert out.stderr.splitlines() == [
        "minisgl: skipped plugin acme_broken (acme-broken 0.1.0): ImportError: libacme.so missing"
    ]
    row = next(line for line in out.stdout.splitlines() if line.startswith("acme_broken"))
    assert "broken: ImportError: libacme.so missing" in row
    assert minisgl("plugins", "--check", env=env).returncode == 1
    assert minisgl("--help", env=env).returncode == 0


def test_strict_mode_and_empty_allow_list(broken_site: Path) -> None:
    strict = minisgl("--help", env=clean_env(PYTHONPATH=str(broken_site),
                                             MINISGL_STRICT_PLUGINS="1"))
    assert strict.returncode == 1
    assert "plugin acme_broken (acme-broken 0.1.0) is broken: ImportError" in strict.stderr
    none = minisgl("plugins", "--json", env=clean_env(PYTHONPATH=str(broken_site),
                                                      MINISGL_LOAD_PLUGINS=""))
    assert none.returncode == 0 and none.stderr == ""
    assert [r["name"] for r in json.loads(none.stdout)] == ["core"]


def test_python_dash_m_is_the_same_command() -> None:
    out = subprocess.run([sys.executable, "-m", "minisgl_core", "--version"], capture_output=True,
                         text=True, timeout=120, env=clean_env(MINISGL_LOAD_PLUGINS=""))
    assert out.returncode == 0 and out.stdout.startswith("minisgl ")
