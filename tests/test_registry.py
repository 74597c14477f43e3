"""Registry: lazy targets, owners, duplicates, did-you-mean."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from minisgl_core.plugin.registry import (
    DuplicateName,
    InvalidTarget,
    Registries,
    Registry,
    TargetLoadError,
    UnknownName,
    load_target,
    unknown_message,
)


def make_transports() -> Registry[object]:
    reg: Registry[object] = Registry("transport")
    reg.add("inproc", "json:dumps", "core.inproc")
    reg.add("zmq", "json:loads", "transport_zmq")
    reg.add("nng", len, "transport_nng")
    return reg


def test_unknown_name_suggests_closest_and_lists_installed() -> None:
    reg = make_transports()
    with pytest.raises(UnknownName) as info:
        reg.get("zmqq")
    assert str(info.value) == (
        'unknown transport "zmqq"; did you mean "zmq"? installed: inproc, nng, zmq'
    )


def test_unknown_name_without_close_match_still_lists_installed() -> None:
    with pytest.raises(UnknownName) as info:
        make_transports().check("websocket")
    assert "did you mean" not in str(info.value)
    assert str(info.value).endswith("installed: inproc, nng, zmq")


def test_unknown_name_matches_case_insensitively() -> None:
    assert 'did you mean "zmq"' in unknown_message("transport", "ZMQ", ["zmq", "nng"])


def test_empty_registry_says_none_installed() -> None:
    with pytest.raises(UnknownName, match=r"installed: \(none\)"):
        Registry("frontend").get("openai")


def test_lazy_target_is_resolved_on_first_use_and_cached() -> None:
    reg = make_transports()
    assert reg.entry("zmq").lazy and not reg.entry("nng").lazy
    assert reg.get("zmq") is json.loads
    assert reg.get("zmq") is reg.get("zmq")
    assert reg.get("nng") is len  # a factory object is returned as is


def test_lazy_target_is_not_imported_before_use(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "minisgl_lazy_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "minisgl_lazy_probe", raising=False)
    reg: Registry[object] = Registry("model")
    reg.add("Probe", "minisgl_lazy_probe:VALUE", "acme")
    reg.check("Probe")
    assert reg.owner("Probe") == "acme"
    assert "minisgl_lazy_probe" not in sys.modules
    assert reg.get("Probe") == 42
    assert "minisgl_lazy_probe" in sys.modules


def test_dotted_attribute_path() -> None:
    assert load_target("json:JSONDecoder.decode") is json.JSONDecoder.decode


def test_failing_lazy_import_names_the_plugin() -> None:
    reg: Registry[object] = Registry("transport")
    reg.add("nng", "minisgl_no_such_module_xyz:Transport", "transport_nng")
    with pytest.raises(TargetLoadError) as info:
        reg.get("nng")
    message = str(info.value)
    assert message.startswith('transport "nng" (from transport_nng) failed to load')
    assert "ModuleNotFoundError" in message and "minisgl_no_such_module_xyz" in message


def test_missing_attribute_is_a_load_error() -> None:
    reg: Registry[object] = Registry("transport")
    reg.add("x", "json:NoSuchThing", "acme")
    with pytest.raises(TargetLoadError, match="AttributeError"):
        reg.get("x")


@pytest.mark.parametrize("target", ["json", "json:", ":dumps", "json: dumps", 42, None])
def test_malformed_targets_are_rejected_at_registration(target: object) -> None:
    with pytest.raises(InvalidTarget):
        Registry("transport").add("x", target, "acme")


@pytest.mark.parametrize("name", ["", " zmq", 3])
def test_malformed_names_are_rejected(name: object) -> None:
    with pytest.raises(InvalidTarget):
        Registry("transport").add(name, "json:dumps", "acme")  # type: ignore[arg-type]


def test_duplicate_name_fails_naming_both_owners() -> None:
    reg = make_transports()
    reg.add("zmq", "json:dumps", "acme_fork")
    with pytest.raises(DuplicateName) as info:
        reg.get("zmq")
    assert 'transport "zmq" registered by transport_zmq and acme_fork' in str(info.value)
    [(error, owners)] = reg.conflicts()
    assert owners == ["transport_zmq", "acme_fork"] and isinstance(error, DuplicateName)
    assert reg.get("nng") is len  # other names stay usable


def test_dropping_an_owner_resolves_its_conflict_and_removes_its_names() -> None:
    reg = make_transports()
    reg.add("zmq", "json:dumps", "acme_fork")
    reg.add("acme", "json:dumps", "acme_fork")
    reg.drop_owner("acme_fork")
    assert reg.names() == ["inproc", "nng", "zmq"]
    assert reg.conflicts() == []
    assert reg.get("zmq") is json.loads


def test_registries_report_provides_per_owner_and_role_kinds() -> None:
    regs = Registries.empty(("tokenizer", "detokenizer", "scheduler"))
    regs.transports.add("zmq", "json:loads", "transport_zmq")
    regs.roles.add("tokenizer", "hf", "json:dumps", "core.roles")
    regs.models.add("LlamaForCausalLM", "json:dumps", "core.models")
    assert regs.provides() == {
        "transport_zmq": ["transport:zmq"],
        "core.roles": ["role:tokenizer:hf"],
        "core.models": ["model:LlamaForCausalLM"],
    }
    assert regs.roles.get("tokenizer", "hf") is json.dumps
    with pytest.raises(UnknownName, match='unknown tokenizer "hff"; did you mean "hf"'):
        regs.roles.get("tokenizer", "hff")
    with pytest.raises(UnknownName, match='unknown role kind "tokeniser"; did you mean'):
        regs.roles.check("tokeniser", "hf")


def test_the_default_is_the_one_a_plugin_offers() -> None:
    reg = make_transports()
    with pytest.raises(LookupError, match="no installed plugin offers a default one; name one "
                                          r"\(installed: inproc, nng, zmq\)"):
        reg.default()
    reg.add("tcp-only", "json:dumps", "acme", default=True)
    assert reg.default() == "tcp-only"
    reg.add("other", "json:dumps", "beta", default=True)
    with pytest.raises(LookupError, match='default transport: "other" \\(beta\\), '
                                          '"tcp-only" \\(acme\\); name one'):
        reg.default()


def test_the_installed_plugins_default_to_zmq_and_openai() -> None:
    from minisgl_core.config.launch import LaunchConfig
    from minisgl_core.config.sources import load_config
    from minisgl_core.plugin.loading import build_manager, collect

    regs = collect(build_manager())
    cfg = regs.with_defaults(load_config(env={}, overrides=["host=0.0.0.0", "api_key=k"]))
    assert (cfg.transport, cfg.frontends) == ("zmq", ("openai",))
    assert cfg.frontends_options == {"openai": {"host": "0.0.0.0", "api_key": "k"}}
    named = LaunchConfig(transport="nng", frontends=("grpc",))
    assert regs.with_defaults(named) == named  # a named choice is kept as it is
