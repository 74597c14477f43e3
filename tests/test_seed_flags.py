"""`python -m minisgl`: mini-sglang's flags mapped onto `minisgl launch`, the CLI's own commands
unchanged, and nothing heavy imported on its --help path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import typer.main

from minisgl_core.cli.app import make_app
from minisgl_core.cli.seed_flags import (
    ANY_MODEL,
    UNSUPPORTED,
    SeedFlagError,
    is_seed_call,
    launch_args,
)
from minisgl_core.config.sources import load_config
from minisgl_core.plugin.loading import build_manager

HEAVY = ("torch", "transformers", "zmq", "pynng", "fastapi", "grpc")
REPO = Path(__file__).resolve().parents[1]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MINISGL_")}


def python_m_minisgl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "minisgl", *args], capture_output=True,
                          text=True, timeout=120, env=clean_env(), cwd=REPO)


def launch_params(argv: list[str]) -> dict[str, Any]:
    """What `minisgl launch` parses out of ``launch_args(argv)`` (parsed only: nothing starts)."""
    translated = launch_args(argv)
    assert translated[0] == "launch"
    app = make_app(build_manager(autoload=False), plugin_commands=False)
    command = typer.main.get_command(app).commands["launch"]  # type: ignore[attr-defined]
    with command.make_context("launch", translated[1:]) as ctx:
        return dict(ctx.params)


def test_the_seeds_command_line_is_launchs() -> None:
    params = launch_params(["--model", "models/Qwen3-0.6B", "--dtype", "float32", "--port",
                            "8123", "--host", "0.0.0.0", "--num-pages", "4096",
                            "--max-seq-len-override", "1024", "--page-size", "16", "--tp", "2"])
    assert {k: params[k] for k in ("model", "dtype", "port", "host", "num_pages",
                                   "max_seq_len_override", "page_size", "tp")} == {
        "model": "models/Qwen3-0.6B", "dtype": "float32", "port": 8123, "host": "0.0.0.0",
        "num_pages": 4096, "max_seq_len_override": 1024, "page_size": 16, "tp": 2}
    assert params["set_"] == ["frontends.openai.accept_any_model=true"]


def test_mini_sglangs_other_spellings_map_onto_launchs_keys() -> None:
    params = launch_params(["--model-path=/m", "--tp-size", "2", "--cache-type", "naive",
                            "--max-running-requests", "8", "--max-prefill-length=512",
                            "--model-source", "huggingface"])
    assert (params["model"], params["tp"], params["cache"]) == ("/m", 2, "naive")
    cfg = load_config(None, flags={}, overrides=params["set_"])
    assert (cfg.max_running_requests, cfg.max_prefill_tokens) == (8, 512)
    assert cfg.frontend_table("openai") == {"accept_any_model": True}
    assert launch_params(["--tensor-parallel-size", "4"])["tp"] == 4
    assert "max_prefill_tokens=64" in launch_params(["--max-extend-length", "64"])["set_"]


def test_launchs_own_flags_pass_through_and_a_later_set_wins() -> None:
    params = launch_params(["--transport", "nng", "-s",
                            "frontends.openai.accept_any_model=false"])
    assert params["transport"] == "nng"
    cfg = load_config(None, flags={}, overrides=params["set_"])
    assert cfg.frontend_table("openai")["accept_any_model"] is False


@pytest.mark.parametrize("flag", sorted(UNSUPPORTED))
def test_a_flag_without_an_equivalent_is_refused_naming_it(flag: str) -> None:
    with pytest.raises(SeedFlagError, match=f"^{flag} is mini-sglang's and has no equivalent"):
        launch_args(["--model", "m", flag, "1"])


def test_bad_values_are_refused() -> None:
    with pytest.raises(SeedFlagError, match="--model-source modelscope: only huggingface"):
        launch_args(["--model-source", "modelscope"])
    with pytest.raises(SeedFlagError, match="--max-running-requests needs a value"):
        launch_args(["--max-running-requests"])


def test_only_bare_flags_are_the_seeds_spelling() -> None:
    assert is_seed_call(["--model", "m"]) and is_seed_call(["-s", "port=1"])
    for argv in ([], ["--help"], ["--version"], ["launch", "--model", "m"], ["plugins"]):
        assert not is_seed_call(argv), argv
    assert launch_args([]) == ["launch", *ANY_MODEL]


def test_python_m_minisgl_refuses_an_unsupported_flag_with_exit_2() -> None:
    out = python_m_minisgl("--model", "m", "--memory-ratio", "0.5")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("minisgl: error: --memory-ratio is mini-sglang's")


def test_python_m_minisgl_runs_the_cli_commands() -> None:
    out = python_m_minisgl("plugins", "--json")
    assert out.returncode == 0, out.stderr
    names = {row["name"] for row in json.loads(out.stdout)}
    assert {"core", "transport_zmq", "frontend_openai"} <= names
    launch_help = python_m_minisgl("--model", "m", "--help")
    assert launch_help.returncode == 0 and "Usage: minisgl launch" in launch_help.stdout


@pytest.mark.parametrize("argv", [["--help"], ["--model", "m", "--help"]])
def test_python_m_minisgl_help_imports_no_heavy_library(argv: list[str]) -> None:
    code = textwrap.dedent(
        f"""
        import json, runpy, sys
        sys.argv = ["minisgl", *{argv!r}]
        try:
            runpy.run_module("minisgl", run_name="__main__")
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
    if argv == ["--help"]:  # the CLI's help, then what the seed's spelling adds
        assert "launch" in out.stdout and "python -m minisgl --model PATH" in out.stdout
