"""One test per hook (test_hook_<name>), plus the guard that every hook is documented and tested."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from minisgl_core import hookimpl
from minisgl_core.cli.app import make_app
from minisgl_core.config.launch import LaunchConfig
from minisgl_core.plugin import hookspecs
from minisgl_core.plugin.loading import collect, configure, unconfigure
from minisgl_core.plugin.model_lookup import resolve_model
from minisgl_core.testing.fixtures import minisgl_pm  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
HOOKS = sorted(n for n, f in vars(hookspecs).items() if n.startswith("minisgl_") and callable(f))


def test_hook_minisgl_register_transports(minisgl_pm) -> None:  # noqa: F811
    class Acme:
        @hookimpl
        def minisgl_register_transports(self, register):
            register("acme", "json:dumps")

    minisgl_pm.register(Acme(), name="transport_acme")
    regs = collect(minisgl_pm)
    assert regs.transports.owner("acme") == "transport_acme"
    assert regs.transports.get("acme") is json.dumps


def test_hook_minisgl_register_frontends(minisgl_pm) -> None:  # noqa: F811
    class Web:
        @hookimpl
        def minisgl_register_frontends(self, register):
            register("web", dict)

    minisgl_pm.register(Web(), name="frontend_web")
    regs = collect(minisgl_pm)
    assert regs.frontends.names() == ["web"] and regs.frontends.get("web") is dict


def test_hook_minisgl_register_roles(minisgl_pm) -> None:  # noqa: F811
    class Roles:
        @hookimpl
        def minisgl_register_roles(self, register):
            for kind in hookspecs.ROLE_KINDS:
                register(kind, "acme", f"json:{'dumps' if kind != 'scheduler' else 'loads'}")

    minisgl_pm.register(Roles(), name="acme_roles")
    regs = collect(minisgl_pm)
    assert regs.roles.get("scheduler", "acme") is json.loads
    assert regs.roles["tokenizer"].owner("acme") == "acme_roles"
    assert "role:detokenizer:acme" in regs.provides()["acme_roles"]


def test_hook_minisgl_register_models(minisgl_pm) -> None:  # noqa: F811
    class Models:
        @hookimpl
        def minisgl_register_models(self, register):
            register("AcmeForCausalLM", "json:JSONDecoder")

    minisgl_pm.register(Models(), name="acme_models")
    assert collect(minisgl_pm).models.get("AcmeForCausalLM") is json.JSONDecoder


def test_hook_minisgl_register_commands(minisgl_pm) -> None:  # noqa: F811
    class Commands:
        @hookimpl
        def minisgl_register_commands(self, app: typer.Typer):
            @app.command("hello")
            def hello(name: str = "world") -> None:
                """Say hello."""
                typer.echo(f"hello {name}")

    minisgl_pm.register(Commands(), name="acme_cli")
    result = CliRunner().invoke(make_app(minisgl_pm), ["hello", "--name", "acme"])
    assert result.exit_code == 0 and result.output == "hello acme\n"


def test_hook_minisgl_resolve_model(minisgl_pm, tmp_path: Path) -> None:  # noqa: F811
    calls: list[str | None] = []

    class Declines:
        @hookimpl(tryfirst=True)
        def minisgl_resolve_model(self, spec):
            calls.append(spec)
            return None

    class Knows:
        @hookimpl
        def minisgl_resolve_model(self, spec):
            return str(tmp_path) if spec == "acme/tiny" else None

    minisgl_pm.register(Declines(), name="declines")
    minisgl_pm.register(Knows(), name="knows")
    assert resolve_model(minisgl_pm, "acme/tiny") == str(tmp_path)
    assert calls == ["acme/tiny"]  # asked first, said None, the next plugin answered


def test_hook_minisgl_configure(minisgl_pm) -> None:  # noqa: F811
    seen: list[tuple[str, str]] = []

    class Metrics:
        @hookimpl
        def minisgl_configure(self, config, process):
            seen.append((process, config.plugin_table("acme_metrics")["interval_s"]))

    minisgl_pm.register(Metrics(), name="acme_metrics")
    config = LaunchConfig(plugins={"acme_metrics": {"interval_s": 10}})
    configure(minisgl_pm, config, "scheduler")
    assert seen == [("scheduler", 10)]


def test_hook_minisgl_unconfigure(minisgl_pm) -> None:  # noqa: F811
    seen: list[str] = []

    class Metrics:
        @hookimpl
        def minisgl_unconfigure(self, process):  # opt-in arguments: a subset is fine
            seen.append(process)

    minisgl_pm.register(Metrics(), name="acme_metrics")
    unconfigure(minisgl_pm, LaunchConfig(), "tokenizer")
    assert seen == ["tokenizer"]


def test_every_hook_has_a_test() -> None:
    names = {n.removeprefix("test_hook_") for n in globals() if n.startswith("test_hook_")}
    assert names == set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented_with_its_arguments(hook: str) -> None:
    args = ", ".join(inspect.signature(getattr(hookspecs, hook)).parameters)
    text = (ROOT / "docs" / "hooks.md").read_text()
    assert re.search(rf"^## `?{hook}\({re.escape(args)}\)`?$", text, re.M), f"## {hook}({args})"
