"""Plugin loading: default plugins, entry points one by one, isolation, allow-list, strict mode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from minisgl_core import hookimpl
from minisgl_core.plugin.listing import describe
from minisgl_core.plugin.loading import (
    DEFAULT_PLUGINS,
    PluginLoadError,
    build_manager,
    collect,
    loaded_module_names,
)
from minisgl_core.testing.fixtures import minisgl_plugin_dist, minisgl_pm  # noqa: F401

GOOD = textwrap.dedent(
    """
    from minisgl_core import hookimpl

    @hookimpl
    def minisgl_register_transports(register):
        register("acme", "json:dumps")
    """
)
BROKEN = 'raise ImportError("libacme.so: cannot open shared object file")\n'


@pytest.fixture(autouse=True)
def _plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # `make test` sets MINISGL_STRICT_PLUGINS=1; these tests choose strictness themselves.
    for var in ("MINISGL_STRICT_PLUGINS", "MINISGL_LOAD_PLUGINS", "MINISGL_TRACE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)


def test_default_plugins_load_even_as_placeholders(minisgl_pm) -> None:  # noqa: F811
    names = {minisgl_pm.get_name(p) for p in minisgl_pm.get_plugins()}
    assert {f"core.{m.rsplit('.', 1)[-1]}" for m in DEFAULT_PLUGINS} <= names
    assert not minisgl_pm.broken
    assert all(o.dist == "minisgl-core" for o in minisgl_pm.origins.values())
    assert "inproc" in collect(minisgl_pm).transports


def test_entry_point_plugin_is_loaded_with_its_distribution(minisgl_plugin_dist, monkeypatch):  # noqa: F811
    minisgl_plugin_dist("minisgl-transport-acme", {"transport_acme": "acme_ok"},
                        {"acme_ok.py": GOOD}, version="1.2.3")
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "transport_acme")
    pm = build_manager()
    origin = pm.origins["transport_acme"]
    assert (origin.dist, origin.version, origin.module) == ("minisgl-transport-acme", "1.2.3",
                                                            "acme_ok")
    regs = collect(pm)
    assert regs.transports.owner("acme") == "transport_acme"
    row = next(r for r in describe(pm, regs) if r.name == "transport_acme")
    assert row.provides == ("transport:acme",) and row.status == "ok"


def test_broken_entry_point_is_skipped_with_one_stderr_line(
    minisgl_plugin_dist, monkeypatch, capsys  # noqa: F811
) -> None:
    minisgl_plugin_dist("acme-broken", {"acme_broken": "acme_broken"},
                        {"acme_broken.py": BROKEN})
    minisgl_plugin_dist("acme-ok", {"acme_ok": "acme_ok"}, {"acme_ok.py": GOOD})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "acme_broken,acme-ok")
    pm = build_manager()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "minisgl: skipped plugin acme_broken (acme-broken 0.1.0): "
        "ImportError: libacme.so: cannot open shared object file"
    ]
    assert "acme_broken" in pm.broken and "acme_broken" not in pm.origins
    assert "acme" in collect(pm).transports  # the next plugin still loaded
    rows = {r.name: r for r in describe(pm, collect(pm))}
    assert rows["acme_broken"].status.startswith("broken: ImportError: libacme.so")
    assert rows["acme_broken"].dist == "acme-broken"


def test_strict_mode_makes_a_broken_plugin_fatal(minisgl_plugin_dist, monkeypatch):  # noqa: F811
    minisgl_plugin_dist("acme-broken", {"acme_broken": "acme_broken"},
                        {"acme_broken.py": BROKEN})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "acme_broken")
    monkeypatch.setenv("MINISGL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="plugin acme_broken .* is broken: ImportError"):
        build_manager()


def test_empty_allow_list_loads_no_entry_points(minisgl_plugin_dist, monkeypatch):  # noqa: F811
    minisgl_plugin_dist("acme-ok", {"acme_ok": "acme_ok"}, {"acme_ok.py": GOOD})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "")
    pm = build_manager()
    assert all(o.source == "default" for o in pm.origins.values())
    assert "acme" not in collect(pm).transports


def test_allow_list_accepts_distribution_names(minisgl_plugin_dist, monkeypatch):  # noqa: F811
    minisgl_plugin_dist("minisgl-transport-acme", {"transport_acme": "acme_ok"},
                        {"acme_ok.py": GOOD})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "minisgl_transport_acme")
    assert "transport_acme" in build_manager().origins


def test_unknown_hook_fails_validation_and_is_unregistered(minisgl_pm, capsys):  # noqa: F811
    from minisgl_core.plugin.loading import Origin, register_plugin

    plugin = SimpleNamespace(minisgl_register_transport=hookimpl(lambda register: None))
    ok = register_plugin(minisgl_pm, plugin, Origin("typo", None, "-", "-", "extra"))
    assert not ok and minisgl_pm.get_plugin("typo") is None
    assert "unknown hook 'minisgl_register_transport'" in minisgl_pm.broken["typo"].error
    assert "skipped plugin typo" in capsys.readouterr().err


def test_hookimpl_with_wrong_arguments_fails_validation(minisgl_plugin_dist, monkeypatch):  # noqa: F811
    source = GOOD.replace("(register)", "(register, colour)")
    minisgl_plugin_dist("acme-bad", {"acme_bad": "acme_bad"}, {"acme_bad.py": source})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "acme_bad")
    pm = build_manager()
    assert pm.get_plugin("acme_bad") is None
    assert "PluginValidationError" in pm.broken["acme_bad"].error
    assert "colour" in pm.broken["acme_bad"].error


def test_exception_in_register_hook_drops_all_its_registrations(minisgl_pm, capsys):  # noqa: F811
    class Flaky:
        @hookimpl
        def minisgl_register_transports(self, register):
            register("flaky", "json:dumps")

        @hookimpl
        def minisgl_register_models(self, register):
            raise RuntimeError("model table is corrupt")

    minisgl_pm.register(Flaky(), name="flaky")
    regs = collect(minisgl_pm)
    assert "flaky" not in regs.transports  # registered before the failure, dropped with it
    assert "inproc" in regs.transports
    assert "RuntimeError: model table is corrupt" in minisgl_pm.broken["flaky"].error
    assert capsys.readouterr().err.count("\n") == 1


def test_malformed_registration_marks_the_plugin_broken(minisgl_pm) -> None:  # noqa: F811
    class Bad:
        @hookimpl
        def minisgl_register_roles(self, register):
            register("tokeniser", "hf", "json:dumps")

    minisgl_pm.register(Bad(), name="bad")
    collect(minisgl_pm)
    assert 'unknown role kind "tokeniser"; did you mean "tokenizer"' in minisgl_pm.broken[
        "bad"].error


def test_duplicate_names_from_two_plugins_are_reported_not_fatal(minisgl_pm) -> None:  # noqa: F811
    class Fork:
        @hookimpl
        def minisgl_register_transports(self, register):
            register("inproc", "json:dumps")

    minisgl_pm.register(Fork(), name="acme_fork")
    regs = collect(minisgl_pm)
    [(error, owners)] = regs.conflicts()
    assert owners == ["core.inproc", "acme_fork"]
    assert 'transport "inproc" registered by core.inproc and acme_fork' in str(error)
    rows = {r.name: r for r in describe(minisgl_pm, regs, all=True)}
    assert rows["acme_fork"].status.startswith("conflict:")


def test_extra_modules_rebuild_the_same_plugins_by_name(minisgl_plugin_dist, monkeypatch):  # noqa: F811
    minisgl_plugin_dist("minisgl-transport-acme", {"transport_acme": "acme_ok"},
                        {"acme_ok.py": GOOD})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "transport_acme")
    parent = build_manager()
    modules = loaded_module_names(parent)
    assert modules == ["acme_ok"]
    child = build_manager(autoload=False, extra=modules)
    assert child.origins["transport_acme"].dist == "minisgl-transport-acme"
    assert collect(child).transports.owner("acme") == "transport_acme"
    again = build_manager(extra=modules)  # autoload and extra name the same module: once
    assert sorted(again.origins) == sorted(parent.origins)


def test_spawned_process_rebuilds_from_module_names(minisgl_plugin_dist, monkeypatch):  # noqa: F811
    root = minisgl_plugin_dist("minisgl-transport-acme", {"transport_acme": "acme_ok"},
                               {"acme_ok.py": GOOD})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "transport_acme")
    modules = loaded_module_names(build_manager())
    code = (
        "import sys; from minisgl_core.plugin.loading import build_manager, collect\n"
        "pm = build_manager(autoload=False, extra=sys.argv[1:])\n"
        "print(collect(pm).transports.owner('acme'))\n"
    )
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True,
                         env=env, timeout=60, check=True)
    assert out.stdout.strip() == "transport_acme"


def test_unknown_extra_module_is_broken_not_fatal(minisgl_pm) -> None:  # noqa: F811
    pm = build_manager(autoload=False, extra=["minisgl_no_such_plugin_xyz"], strict=False)
    assert "ModuleNotFoundError" in pm.broken["minisgl_no_such_plugin_xyz"].error


def test_objects_registered_in_process_are_not_sent_to_children() -> None:
    class Local:
        @hookimpl
        def minisgl_register_transports(self, register):
            register("local", "json:dumps")

    pm = build_manager(autoload=False, extra=[Local()], strict=False)
    assert "local" in collect(pm).transports
    assert loaded_module_names(pm) == []


def test_trace_env_prints_every_hook_call(monkeypatch, capsys) -> None:
    monkeypatch.setenv("MINISGL_TRACE_PLUGINS", "1")
    class Resolver:
        @hookimpl
        def minisgl_resolve_model(self, spec):
            return f"/models/{spec}"

    pm = build_manager(autoload=False)
    collect(pm)
    for name in list(pm.origins):  # only our resolver answers below
        pm.unregister(name=name)
    pm.register(Resolver(), name="resolver")
    assert pm.hook.minisgl_resolve_model(spec="tiny", revision=None, gguf_file=None,
                                         architectures=None) == "/models/tiny"
    err = capsys.readouterr().err
    assert "minisgl: hook minisgl_register_transports(register) -> core.inproc" in err
    assert ("minisgl: hook minisgl_resolve_model(spec, revision, gguf_file, architectures) "
            "-> resolver") in err
    assert "minisgl: hook minisgl_resolve_model returned '/models/tiny'" in err


def test_two_distributions_with_one_entry_point_name(minisgl_plugin_dist, monkeypatch, capsys):  # noqa: F811
    minisgl_plugin_dist("acme-a", {"transport_acme": "acme_ok"}, {"acme_ok.py": GOOD})
    minisgl_plugin_dist("acme-b", {"transport_acme": "acme_other"},
                        {"acme_other.py": GOOD.replace('"acme"', '"acme2"')})
    monkeypatch.setenv("MINISGL_LOAD_PLUGINS", "transport_acme")
    pm = build_manager()
    loaded = pm.origins["transport_acme"]
    assert pm.broken["transport_acme"].error == (
        f"ValueError: the name transport_acme is taken by {loaded.module} "
        f"({loaded.dist} 0.1.0)"
    )
    assert len(capsys.readouterr().err.splitlines()) == 1
    regs = collect(pm)
    assert len([n for n in ("acme", "acme2") if n in regs.transports]) == 1
