"""Choosing roles: --tokenizer/--detokenizer/--scheduler, [roles], MINISGL_*, -s roles.*."""

from __future__ import annotations

import pickle
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minisgl_core import hookimpl
from minisgl_core.cli.app import make_app
from minisgl_core.config.dump import to_toml
from minisgl_core.config.launch import ConfigError, LaunchConfig
from minisgl_core.config.sources import load_config
from minisgl_core.plugin.loading import build_manager

runner = CliRunner()


class FakeFrontend:
    """An openai frontend whose target imports nothing heavy: launch checks reach the roles."""

    @hookimpl
    def minisgl_register_frontends(self, register):
        register("openai", "json:loads", default=True)


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("MINISGL_STRICT_PLUGINS", "MINISGL_LOAD_PLUGINS", "MINISGL_CONFIG",
                "MINISGL_TOKENIZER", "MINISGL_DETOKENIZER", "MINISGL_SCHEDULER"):
        monkeypatch.delenv(var, raising=False)


def test_defaults_name_every_role() -> None:
    cfg = LaunchConfig()
    assert [cfg.role_name(k) for k in ("tokenizer", "detokenizer", "scheduler")] == [
        "hf", "hf", "continuous"]
    assert cfg.role_table("scheduler") == {}


def test_every_layer_selects_a_role(tmp_path: Path) -> None:
    path = tmp_path / "minisgl.toml"
    path.write_text('[roles]\ntokenizer = "upper"\n\n[roles.scheduler]\nname = "synthetic"\n\n'
                    "[roles.scheduler.synthetic]\ntokens_per_s = 50\n")
    cfg = load_config(path, env={})
    assert cfg.role_name("tokenizer") == "upper" and cfg.role_name("scheduler") == "synthetic"
    assert cfg.role_table("scheduler") == {"tokens_per_s": 50}
    env = {"MINISGL_TOKENIZER": "lower", "MINISGL_DETOKENIZER": "plain"}
    cfg = load_config(path, env=env)
    assert cfg.role_name("tokenizer") == "lower" and cfg.role_name("detokenizer") == "plain"
    cfg = load_config(path, env=env, flags={"tokenizer": "flagged", "scheduler": "continuous"})
    assert cfg.role_name("tokenizer") == "flagged" and cfg.role_name("scheduler") == "continuous"
    assert cfg.role_table("scheduler", "synthetic") == {"tokens_per_s": 50}  # kept for later
    cfg = load_config(path, env=env, flags={"tokenizer": "flagged"},
                      overrides=["roles.tokenizer=last", "roles.scheduler.synthetic.burst=2",
                                 "roles.scheduler.synthetic.tokens_per_s=7.5"])
    assert cfg.role_name("tokenizer") == "last"
    assert cfg.role_table("scheduler") == {"tokens_per_s": 7.5, "burst": 2}


@pytest.mark.parametrize(("override", "message"), [
    ("roles.tokeniser=hf", 'unknown role kind "tokeniser" in roles (-s roles.tokeniser=hf); '
                           'did you mean "tokenizer"?'),
    ("roles.scheduler.synthetic=3", "-s roles.scheduler.<name>.<key>=VALUE expected"),
    ("roles.scheduler=", "roles.scheduler must name a scheduler"),
])
def test_bad_role_settings_say_what_is_wrong(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides=[override])
    assert message in str(info.value)


def test_a_role_value_in_the_file_must_be_a_name_or_tables(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[roles.scheduler]\nsynthetic = 5\n")
    with pytest.raises(ConfigError, match=r"roles.scheduler.synthetic must be the options table"):
        load_config(path, env={})


def test_config_show_writes_roles_that_read_back(tmp_path: Path) -> None:
    cfg = load_config(env={}, flags={"tokenizer": "upper"},
                      overrides=["roles.scheduler=synthetic",
                                 "roles.scheduler.synthetic.tokens_per_s=20"])
    text = to_toml(cfg)
    assert '[roles]\ntokenizer = "upper"\ndetokenizer = "hf"' in text
    assert "[roles.scheduler.synthetic]\ntokens_per_s = 20" in text
    (tmp_path / "shown.toml").write_text(text)
    assert load_config(tmp_path / "shown.toml", env={}) == cfg
    assert tomllib.loads(text)["roles"]["scheduler"]["name"] == "synthetic"
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_launch_checks_role_names_like_transports() -> None:
    app = make_app(build_manager(autoload=False, extra=[FakeFrontend()], strict=False))
    result = runner.invoke(app, ["launch", "--transport", "inproc", "--scheduler", "synthtic"])
    assert result.exit_code == 2
    assert result.stderr == ('minisgl: error: unknown scheduler "synthtic"; did you mean '
                             '"synthetic"? installed: continuous, synthetic\n')
    result = runner.invoke(app, ["launch", "--transport", "inproc", "-s", "roles.tokenizer=hff"])
    assert result.exit_code == 2
    assert 'unknown tokenizer "hff"; did you mean "hf"? installed: hf' in result.stderr


def test_launch_reports_a_role_that_fails_to_import() -> None:
    class Broken:
        @hookimpl
        def minisgl_register_roles(self, register):
            register("detokenizer", "fancy", "minisgl_no_such_role_xyz:make")

    app = make_app(build_manager(autoload=False, extra=[FakeFrontend(), Broken()],
                                 strict=False))
    result = runner.invoke(app, ["launch", "--transport", "inproc", "--detokenizer", "fancy"])
    assert result.exit_code == 2
    assert 'detokenizer "fancy" (from Broken) failed to load' in result.stderr


def test_plugins_lists_roles_by_kind() -> None:
    result = runner.invoke(make_app(build_manager(autoload=False, strict=False)), ["plugins"])
    assert result.exit_code == 0
    roles = result.stdout.split("\n\n", 1)[1].splitlines()
    assert roles[0].split() == ["role", "name", "plugin"]
    assert [line.split()[:2] for line in roles[1:]] == [
        ["tokenizer", "hf"], ["detokenizer", "hf"], ["scheduler", "continuous"],
        ["scheduler", "synthetic"]]
    assert "(default)" in roles[3] and "(default)" not in roles[4]
