"""The plugin's registration, its light import, the stub generator and `minisgl grpc-generate`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from minisgl_frontend_grpc import codegen
from typer.testing import CliRunner

from minisgl_core.cli.app import make_app
from minisgl_core.plugin.loading import build_manager, collect

PLUGIN = "minisgl_frontend_grpc"


def test_import_is_light_and_registers_grpc() -> None:
    code = (
        "import sys\n"
        f"import {PLUGIN}\n"
        "from minisgl_core.plugin.loading import build_manager, collect\n"
        f"pm = build_manager(autoload=False, extra=['{PLUGIN}'], strict=True)\n"
        "regs = collect(pm)\n"
        "assert 'grpc' in regs.frontends.names(), regs.frontends.names()\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'grpc_tools',\n"
        "    'google', 'torch', 'transformers'))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr


def test_registered_factory_is_the_frontend() -> None:
    from minisgl_frontend_grpc.server import GrpcFrontend

    regs = collect(build_manager(autoload=False, extra=[PLUGIN], strict=True))
    assert regs.frontends.get("grpc") is GrpcFrontend


def test_stubs_regenerate_when_stale(tmp_path: Path) -> None:
    assert codegen.is_fresh(codegen.ensure_stubs())
    assert codegen.main(["--check", "--out", str(tmp_path)]) == 1  # missing
    assert codegen.main(["--out", str(tmp_path)]) == 0
    assert codegen.main(["--check", "--out", str(tmp_path)]) == 0
    grpc_code = (tmp_path / "generate_pb2_grpc.py").read_text()
    assert "from . import generate_pb2" in grpc_code
    (tmp_path / "STAMP").write_text("made from an older generate.proto\n")
    assert not codegen.is_fresh(tmp_path)
    assert codegen.main(["--check", "--out", str(tmp_path)]) == 1
    (tmp_path / "generate_pb2.pyi").unlink()
    codegen.generate(tmp_path)
    assert codegen.is_fresh(tmp_path)


def test_grpc_generate_command(run_server, engine) -> None:
    pm = build_manager(autoload=False, extra=[PLUGIN], strict=True)
    app = make_app(pm)

    async def scenario(frontend, channel, engine) -> None:
        def invoke(*args: str):
            return CliRunner().invoke(app, ["grpc-generate", *args, "--url", frontend.address])

        ok = await asyncio.to_thread(invoke, "hello there", "--max-tokens", "4", "--stream")
        assert ok.exit_code == 0, ok.output
        assert engine.expected_text(4) in ok.stdout
        plain = await asyncio.to_thread(invoke, "hi", "--max-tokens", "3", "--temperature", "0")
        assert plain.exit_code == 0 and engine.expected_text(3) in plain.stdout
        assert engine.requests[-1].sampling.temperature == 0.0
        bad = await asyncio.to_thread(invoke, "hi", "--temperature", "-1")
        assert bad.exit_code == 1
        assert "INVALID_ARGUMENT" in bad.output and "temperature" in bad.output

    run_server(scenario)


def test_grpc_generate_help() -> None:
    app = make_app(build_manager(autoload=False, extra=[PLUGIN], strict=True))
    result = CliRunner().invoke(app, ["grpc-generate", "--help"])
    assert result.exit_code == 0
    assert "--max-tokens" in result.output and "--stream" in result.output


def test_read_only_install_falls_back_to_the_user_cache(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "site-packages-file"
    blocker.write_text("a file where the package directory would be: mkdir fails")
    monkeypatch.setattr(codegen, "DEFAULT_OUT", blocker / "_generated")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = codegen.ensure_stubs()
    assert out.is_relative_to(tmp_path / "cache") and codegen.is_fresh(out)
    assert codegen.ensure_stubs() == out  # fresh now: reused, not regenerated
