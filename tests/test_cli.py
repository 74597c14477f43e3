"""The minisgl command through typer's CliRunner, with in-process plugins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from minisgl_core import __version__, hookimpl
from minisgl_core.cli.app import make_app
from minisgl_core.cli.common import lazy_entry
from minisgl_core.plugin.loading import MinisglPluginManager, build_manager

runner = CliRunner()


class FakeZmq:
    """Stands in for the zmq plugin: same names, targets that import nothing heavy."""

    @hookimpl
    def minisgl_register_transports(self, register):
        register("zmq", "json:dumps", default=True)

    @hookimpl
    def minisgl_register_frontends(self, register):
        register("openai", "json:loads", default=True)


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MINISGL_STRICT_PLUGINS", "MINISGL_LOAD_PLUGINS", "MINISGL_CONFIG", "MINISGL_PORT",
                "MINISGL_TRANSPORT", "MINISGL_FRONTEND", "MINISGL_MODEL"):
        monkeypatch.delenv(var, raising=False)


def manager(*plugins: object) -> MinisglPluginManager:
    return build_manager(autoload=False, extra=[FakeZmq(), *plugins], strict=False)


def test_launch_unknown_transport_exits_2_with_suggestion() -> None:
    result = runner.invoke(make_app(manager()), ["launch", "--transport", "zmqq"])
    assert result.exit_code == 2
    assert result.stderr == (
        'minisgl: error: unknown transport "zmqq"; did you mean "zmq"? installed: inproc, zmq\n'
    )


def test_launch_unknown_frontend_in_a_list_exits_2() -> None:
    result = runner.invoke(make_app(manager()), ["launch", "--frontend", "openai,grcp"])
    assert result.exit_code == 2
    assert 'unknown frontend "grcp"; installed: openai' in result.stderr


def test_launch_bad_config_exits_2_before_plugins_matter() -> None:
    result = runner.invoke(make_app(manager()), ["launch", "-s", "prot=9000"])
    assert result.exit_code == 2
    assert 'unknown config key "prot" (-s prot=9000); did you mean "port"?' in result.stderr


def test_launch_refuses_duplicate_names() -> None:
    class Fork:
        @hookimpl
        def minisgl_register_transports(self, register):
            register("zmq", "json:loads")

    result = runner.invoke(make_app(manager(Fork())), ["launch"])
    assert result.exit_code == 2
    assert 'transport "zmq" registered by FakeZmq and Fork' in result.stderr


def test_launch_reports_a_transport_that_fails_to_import() -> None:
    class NoLib:
        @hookimpl
        def minisgl_register_transports(self, register):
            register("nng", "minisgl_no_such_binding_xyz:Transport")

    result = runner.invoke(make_app(manager(NoLib())), ["launch", "--transport", "nng"])
    assert result.exit_code == 2
    assert 'transport "nng" (from NoLib) failed to load' in result.stderr


def test_lazy_entry_says_when_a_part_is_not_there_yet(capsys) -> None:
    with pytest.raises(typer.Exit) as info:
        lazy_entry("minisgl_core.no_such_part:launch", "the service")
    assert info.value.exit_code == 1
    assert "the service is not available yet" in capsys.readouterr().err


def test_lazy_entry_does_not_hide_a_missing_dependency(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "minisgl_needs_dep.py").write_text("import minisgl_missing_dep_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="minisgl_missing_dep_xyz"):
        lazy_entry("minisgl_needs_dep:main", "x")


def test_plugins_table_and_json() -> None:
    app = make_app(manager())
    table = runner.invoke(app, ["plugins"])
    assert table.exit_code == 0
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["name", "dist", "version", "provides", "status"]
    assert lines[0].split()[:3] == ["core", "minisgl-core", __version__]
    assert "transport:inproc" in lines[0] and lines[0].endswith("ok")
    assert any(line.startswith("FakeZmq") and "transport:zmq frontend:openai" in line
               for line in lines)
    rows = json.loads(runner.invoke(app, ["plugins", "--json"]).stdout)
    fake = next(r for r in rows if r["name"] == "FakeZmq")
    assert fake["provides"] == ["transport:zmq", "frontend:openai"] and fake["status"] == "ok"
    assert fake["hooks"] == ["minisgl_register_frontends", "minisgl_register_transports"]
    hooked = json.loads(runner.invoke(app, ["plugins", "--json", "--hook", "register_frontends"])
                        .stdout)
    assert [r["name"] for r in hooked] == ["FakeZmq"]


def test_plugins_check_fails_on_a_broken_plugin() -> None:
    assert runner.invoke(make_app(manager()), ["plugins", "--check"]).exit_code == 0
    pm = build_manager(autoload=False, extra=["minisgl_no_such_plugin_xyz"], strict=False)
    result = runner.invoke(make_app(pm), ["plugins", "--check"])
    assert result.exit_code == 1
    assert "broken: ModuleNotFoundError" in result.stdout


def test_version_lists_plugins() -> None:
    result = runner.invoke(make_app(manager()), ["--version"])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[:2] == [f"minisgl {__version__}",
                                             f"  core (minisgl-core {__version__})"]


def test_config_show_merges_file_env_and_overrides(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text('transport = "nng"\nport = 8100\n')
    monkeypatch.setenv("MINISGL_PORT", "8200")
    app = make_app(manager())
    result = runner.invoke(app, ["config", "show", "-c", str(path), "-s", "tp=2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["transport"], data["frontends"]["openai"]["port"], data["tp"]) == ("nng", 8200, 2)
    toml = runner.invoke(app, ["config", "show", "-s", "transports.zmq.linger_ms=0"])
    assert 'transport = "zmq"' in toml.stdout and "[transports.zmq]\nlinger_ms = 0" in toml.stdout
    bad = runner.invoke(app, ["config", "show", "-s", "fronted=grpc"])
    assert bad.exit_code == 2 and 'did you mean "frontend"' in bad.stderr


def test_config_show_never_prints_an_api_key() -> None:
    result = runner.invoke(make_app(manager()), ["config", "show", "-s", "frontend=openai,grpc",
                                                 "-s", "api_key=sk-secret"])
    assert result.exit_code == 0, result.output
    assert "sk-secret" not in result.stdout
    assert result.stdout.count('api_key = "<redacted>"') == 2  # each frontend's


class OnlyZmq:
    @hookimpl
    def minisgl_register_transports(self, register):
        register("zmq", "json:dumps", default=True)


@pytest.mark.parametrize(("args", "message"), [
    (["--port", "70000"], "[frontends.openai] port must be in 0..65535, got 70000"),
    (["-s", "frontends.openai.max_body=1"],
     "unknown option 'max_body' in [frontends.openai]; did you mean \"max_body_bytes\"?"),
    (["--frontend", "grpc", "-s", "frontends.grpc.grace_s=0"],
     "[frontends.grpc] grace_s must be > 0, got 0.0"),
    (["-s", 'frontends.openai.host=""'], "[frontends.openai] host must not be empty"),
    (["-s", "frontends.openai.access_log=1"],
     "[frontends.openai] access_log must be true or false"),
])
def test_launch_checks_each_frontends_options_before_starting(args: list[str],
                                                              message: str) -> None:
    import minisgl_frontend_grpc
    import minisgl_frontend_openai

    pm = build_manager(autoload=False, strict=False,
                       extra=[OnlyZmq(), minisgl_frontend_openai, minisgl_frontend_grpc])
    result = runner.invoke(make_app(pm), ["launch", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_bench_transport_validates_names() -> None:
    result = runner.invoke(make_app(manager()), ["bench", "transport", "--transport", "inprocc"])
    assert result.exit_code == 2 and 'did you mean "inproc"' in result.stderr


def test_plugin_command_failures_leave_help_working() -> None:
    class Raises:
        @hookimpl
        def minisgl_register_commands(self, app):
            raise RuntimeError("no commands today")

    class Clashes:
        @hookimpl
        def minisgl_register_commands(self, app):
            app.command("launch")(lambda: None)

    class Unbuildable:
        @hookimpl
        def minisgl_register_commands(self, app):
            def weird(x: MissingType) -> None:  # noqa: F821 - typer fails to build this
                """Never shown."""

            app.command("weird")(weird)

    class Fine:
        @hookimpl
        def minisgl_register_commands(self, app):
            app.command("fine")(lambda: typer.echo("fine"))

    pm = manager(Raises(), Clashes(), Unbuildable(), Fine())
    app = make_app(pm)
    assert set(pm.broken) == {"Raises", "Clashes", "Unbuildable"}
    assert "already exists" in pm.broken["Clashes"].error
    help_text = runner.invoke(app, ["--help"])
    assert help_text.exit_code == 0 and "launch" in help_text.stdout
    assert "fine" in help_text.stdout and "weird" not in help_text.stdout
    assert runner.invoke(app, ["fine"]).stdout == "fine\n"
    listed = json.loads(runner.invoke(app, ["plugins", "--json"]).stdout)
    assert {r["name"] for r in listed if r["status"].startswith("broken")} == set(pm.broken)
