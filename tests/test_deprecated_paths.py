"""Every import path of an earlier layout still works for a release: the same object, with a
DeprecationWarning that names where to import it from now (the public API when it is there)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from minisgl_core import api, deprecated

# (old module, a name it had, where that name is now); every moved module has a row
OLD_NAMES = [
    ("minisgl_core.messages", "GenerateRequest", "minisgl_core.api.GenerateRequest"),
    ("minisgl_core.messages", "SamplingParams", "minisgl_core.api.SamplingParams"),
    ("minisgl_core.codec", "encode", "minisgl_core.wire.codec.encode"),
    ("minisgl_core.hookspecs", "ROLE_KINDS", "minisgl_core.api.ROLE_KINDS"),
    ("minisgl_core.plugins", "build_manager", "minisgl_core.api.build_manager"),
    ("minisgl_core.plugin_manager", "MinisglPluginManager",
     "minisgl_core.plugin.manager.MinisglPluginManager"),
    ("minisgl_core.registry", "Registries", "minisgl_core.plugin.registry.Registries"),
    ("minisgl_core.plugin_listing", "describe", "minisgl_core.plugin.listing.describe"),
    ("minisgl_core.model_lookup", "resolve_model", "minisgl_core.api.resolve_model"),
    ("minisgl_core.transport_util", "TransportOptions", "minisgl_core.api.TransportOptions"),
    ("minisgl_core.wire.transport_util", "check_size", "minisgl_core.api.check_size"),
    ("minisgl_core.client", "EngineClient", "minisgl_core.api.EngineClient"),
    ("minisgl_core.launcher", "start_service", "minisgl_core.service.launcher.start_service"),
    ("minisgl_core.launcher", "STOP_GRACE_S", "minisgl_core.service.running.STOP_GRACE_S"),
    ("minisgl_core.launch_serve", "serve_forever", "minisgl_core.service.serve.serve_forever"),
    ("minisgl_core.rundir", "private_run_dir", "minisgl_core.api.private_run_dir"),
    ("minisgl_core.ports", "free_port", "minisgl_core.service.ports.free_port"),
    ("minisgl_core.runtime", "spec", None),  # a package again: its submodule, no warning
    ("minisgl_core.runtime.client", "TransportEngineClient",
     "minisgl_core.service.transport_client.TransportEngineClient"),
    ("minisgl_core.runtime.roles", "make_tokenizer", "minisgl_core.api.make_tokenizer"),
    ("minisgl_core.runtime.scheduler", "SchedulerLoop",
     "minisgl_core.service.scheduler_loop.SchedulerLoop"),
    ("minisgl_core.runtime.spec", "WorkerSpec", "minisgl_core.api.WorkerSpec"),
    ("minisgl_core.runtime.spec", "RoleName", "minisgl_core.api.RoleKind"),
    ("minisgl_core.runtime.text_loops", "run_tokenizer",
     "minisgl_core.service.text_loops.run_tokenizer"),
    ("minisgl_core.runtime.worker", "run_role", "minisgl_core.service.worker.run_role"),
    ("minisgl_core.config", "LaunchConfig", "minisgl_core.api.LaunchConfig"),
    ("minisgl_core.config", "load_config", "minisgl_core.config.sources.load_config"),
    ("minisgl_core.config_roles", "DEFAULT_ROLES", "minisgl_core.config.roles.DEFAULT_ROLES"),
    ("minisgl_core.config_dump", "to_toml", "minisgl_core.config.dump.to_toml"),
    ("minisgl_core.cli", "make_app", "minisgl_core.cli.app.make_app"),
    ("minisgl_core.cli", "launch", "minisgl_core.cli.launch_commands.launch"),
    ("minisgl_core.cli_common", "lazy_entry", "minisgl_core.cli.common.lazy_entry"),
    ("minisgl_core.engine.llm", "LLM", "minisgl_core.api.LLM"),
    ("minisgl_core.engine.bench", "main", "minisgl_core.bench.engine_vs_hf.main"),
    ("minisgl_core.engine.bench_prefix", "main", "minisgl_core.bench.prefix_cache.main"),
    ("minisgl_core.engine.tp_local", "LocalGroup", "minisgl_core.service.tp_local.LocalGroup"),
    ("minisgl_core.engine.scheduler", "Scheduler", "minisgl_core.engine.batching.Batcher"),
    ("minisgl_core.engine.convert", "convert_gguf", "minisgl_core.store.convert.convert_gguf"),
    ("minisgl_core.engine.linear", "Linear", "minisgl_core.kernels.Linear"),
    ("minisgl_core.engine.kernel_choice", "choose", "minisgl_core.kernels.matmul.choice.choose"),
    ("minisgl_core.engine.quant", "int8_kernels", "minisgl_core.kernels.matmul.w8a8.int8_kernels"),
    ("minisgl_core.engine.wo_quant", "Int8Weight",
     "minisgl_core.kernels.matmul.weight_only.Int8Weight"),
    ("minisgl_core.engine.amx_hf", "AmxHF", "minisgl_core.kernels.matmul.amx.AmxHF"),
    ("minisgl_core.engine.native", "library", "minisgl_core.kernels.native.library.library"),
    ("minisgl_core.engine.native_ops", "available", "minisgl_core.kernels.native.ops.available"),
    ("minisgl_core.engine.native_attention", "usable", "minisgl_core.kernels.attention.usable"),
    ("minisgl_core.engine.compiled_ops", "new_handle", "minisgl_core.kernels.handles.new_handle"),
    ("minisgl_core.engine.compiled_ops", "without_collectives",
     "minisgl_core.kernels.ops.without_collectives"),
    ("minisgl_core.engine.weights", "ensure_default_model",
     "minisgl_core.store.default_model.ensure_default_model"),
    ("minisgl_core.engine.weights", "find_default_gguf",
     "minisgl_core.store.default_model.find_default_gguf"),
    ("minisgl_core.engine.weights", "DEFAULT_PACKAGE",
     "minisgl_core.store.default_model.DEFAULT_PACKAGE"),
    ("minisgl_core.engine.weights", "DEFAULT_MODULE",
     "minisgl_core.store.default_model.DEFAULT_MODULE"),
    ("minisgl_core.engine.weights", "DEFAULT_NAME", "minisgl_core.store.naming.DEFAULT_NAME"),
    ("minisgl_core.engine.weights", "MARKER", "minisgl_core.store.naming.MARKER"),
    ("minisgl_core.engine.weights", "model_name_of", "minisgl_core.store.naming.model_name_of"),
    ("minisgl_core.config.launch", "load_config", "minisgl_core.config.sources.load_config"),
    ("minisgl_core.default_plugins", "DEFAULT_PLUGINS",
     "minisgl_core.plugin.loading.DEFAULT_PLUGINS"),
    ("minisgl_core.service.spec", "RoleName", "minisgl_core.api.RoleKind"),
]


def _object_at(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old, name, new", OLD_NAMES, ids=lambda v: str(v))
def test_an_old_path_gives_the_same_object_and_names_the_new_path(
        old: str, name: str, new: str | None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if new is None:  # a submodule: imported as one, then an attribute as usual
            submodule = importlib.import_module(f"{old}.{name}")
            assert getattr(importlib.import_module(old), name) is submodule
            assert not [w for w in caught if issubclass(w.category, DeprecationWarning)]
            return
        value = getattr(importlib.import_module(old), name)
    assert value is _object_at(new)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert messages == [f"{old}.{name} is deprecated and goes away in minisgl "
                        f"{deprecated.REMOVED_IN}: use {new}"]


def test_every_moved_module_and_renamed_name_has_a_row() -> None:
    olds = {old for old, _, _ in OLD_NAMES}
    assert set(deprecated.MOVED_MODULES) <= olds
    assert {key.split(":")[0] for key in deprecated.MOVED_NAMES} <= olds
    renamed = {k for k, v in deprecated.MOVED_NAMES.items() if k.split(":")[1] != v.split(":")[1]}
    assert renamed <= {f"{old}:{name}" for old, name, _ in OLD_NAMES}


def test_the_warning_points_at_the_importing_line() -> None:
    with pytest.warns(DeprecationWarning, match="use minisgl_core.api.TokenizedRequest") as rec:
        from minisgl_core.messages import TokenizedRequest
    assert TokenizedRequest is api.TokenizedRequest
    assert rec[0].filename == __file__


def test_an_unknown_name_of_an_old_path_is_an_attribute_error() -> None:
    import minisgl_core.messages as old

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for a name that never existed
        assert not hasattr(old, "NoSuchMessage")
        with pytest.raises(ImportError, match="NoSuchMessage"):
            from minisgl_core.messages import NoSuchMessage  # noqa: F401


def test_old_paths_import_in_a_fresh_interpreter() -> None:
    # nothing imported minisgl_core before: importing an old path installs the finder itself
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import minisgl_core.runtime.roles as r\n"
            "try:\n    r.make_detokenizer\nexcept DeprecationWarning as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert "use minisgl_core.api.make_detokenizer" in out.stdout


def test_a_factory_of_the_old_form_reads_the_worker_spec_off_its_role_context() -> None:
    from minisgl_core.api import LaunchConfig, RoleContext, WorkerSpec
    from minisgl_core.service.spec import Endpoints

    spec = WorkerSpec(role="tokenizer", config=LaunchConfig(transport="inproc"),
                      endpoints=Endpoints("a", "b", "c", "d"), model_dir="/models/m",
                      max_context=128)
    context = RoleContext(spec, {}, None)  # type: ignore[arg-type]

    def old_factory(spec: WorkerSpec) -> tuple[str, int, str]:
        return spec.model_dir, spec.max_context, spec.config.transport

    with pytest.warns(DeprecationWarning) as caught:
        assert old_factory(context) == ("/models/m", 128, "inproc")  # type: ignore[arg-type]
    assert {str(w.message).rsplit(" ", 1)[-1] for w in caught} == {
        "context.spec.model_dir", "context.spec.max_context", "context.spec.config"}
    with pytest.raises(AttributeError, match="no attribute 'model_path'"):
        context.model_path  # noqa: B018 - a name WorkerSpec never had is no forwarded field
