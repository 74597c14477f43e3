"""Config: defaults < TOML file < env < flags < -s, type coercion, unknown keys, round trips."""

from __future__ import annotations

import json
import pickle
import tomllib
from pathlib import Path

import pytest

from minisgl_core.config.dump import to_json, to_toml
from minisgl_core.config.launch import ConfigError, LaunchConfig
from minisgl_core.config.merge import from_file_form
from minisgl_core.config.sources import load_config

FILE = """
transport = "nng"
frontend = ["openai", "grpc"]
port = 8100
model = "/models/tiny"
ready_timeout_s = 30

[transports.zmq]
linger_ms = 0

[frontends.openai]
cors = ["http://localhost"]

[plugins.acme_metrics]
interval_s = 10
"""


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "minisgl.toml"
    path.write_text(FILE)
    return path


def openai(cfg: LaunchConfig) -> dict[str, object]:
    return cfg.frontend_table("openai")


def test_defaults() -> None:
    cfg = load_config(env={})
    assert cfg == LaunchConfig()
    # the core names no transport or frontend: the installed plugins offer the defaults
    assert (cfg.transport, cfg.frontends) == (None, None)
    assert cfg.frontends_options == {}  # a frontend's options and defaults are its own
    assert (cfg.model, cfg.dtype, cfg.device, cfg.tp, cfg.cache) == (None, "auto", "cpu", 1,
                                                                     "radix")


def test_file_layer(toml_file: Path) -> None:
    cfg = load_config(toml_file, env={})
    assert cfg.transport == "nng" and cfg.frontends == ("openai", "grpc")
    assert cfg.ready_timeout_s == 30.0
    assert cfg.transport_table("zmq") == {"linger_ms": 0}
    assert openai(cfg) == {"port": 8100, "cors": ["http://localhost"]}  # port: its shorthand
    assert cfg.plugin_table("acme_metrics") == {"interval_s": 10}
    assert cfg.transport_table("nng") == {}


def test_each_layer_overrides_the_one_below(toml_file: Path) -> None:
    env = {"MINISGL_PORT": "8200", "MINISGL_TRANSPORT": "zmq", "MINISGL_API_KEY": "secret"}
    cfg = load_config(toml_file, env=env)
    assert (openai(cfg)["port"], cfg.transport, openai(cfg)["api_key"]) == (8200, "zmq", "secret")
    assert cfg.frontend_table("grpc") == {"api_key": "secret"}  # every frontend's, not its port
    cfg = load_config(toml_file, env=env, flags={"port": 8300, "transport": None})
    assert (openai(cfg)["port"], cfg.transport) == (8300, "zmq")  # None = flag not given
    cfg = load_config(toml_file, env=env, flags={"port": 8300},
                      overrides=["port=8400", "api_key="])
    assert openai(cfg)["port"] == 8400 and "api_key" not in openai(cfg)


def test_a_shorthand_and_the_table_it_writes_follow_the_layers(toml_file: Path) -> None:
    cfg = load_config(toml_file, env={}, overrides=["frontends.openai.port=9000"])
    assert openai(cfg)["port"] == 9000  # -s over the file's shorthand
    cfg = load_config(toml_file, env={"MINISGL_HOST": "0.0.0.0"},
                      overrides=["frontends.grpc.host=::1", "frontend=grpc"])
    assert cfg.frontend_table("grpc") == {"host": "::1"}
    assert "host" not in openai(cfg)  # openai is not selected: the shorthand skipped it
    with pytest.warns(DeprecationWarning, match=r'frontend_table\("openai"\)\["port"\]'):
        assert load_config(toml_file, env={}).port == 8100
    with pytest.warns(DeprecationWarning, match="LaunchConfig.host"):
        assert LaunchConfig().host == "127.0.0.1"


def test_later_overrides_win_and_tables_merge_deeply(toml_file: Path) -> None:
    cfg = load_config(toml_file, env={}, overrides=[
        "transports.zmq.sndhwm=1000", "transports.zmq.linger_ms=5",
        "frontends.grpc.reflection=true", "plugins.acme_metrics.labels.region=\"eu\"",
        "port=1", "port=2",
    ])
    assert openai(cfg)["port"] == 2
    assert cfg.transport_table("zmq") == {"linger_ms": 5, "sndhwm": 1000}
    assert cfg.frontend_table("grpc") == {"reflection": True}
    assert cfg.plugin_table("acme_metrics") == {"interval_s": 10, "labels": {"region": "eu"}}


def test_frontend_lists_from_text_layers() -> None:
    assert load_config(env={"MINISGL_FRONTEND": "openai, grpc"}).frontends == ("openai", "grpc")
    assert load_config(env={}, overrides=["frontends=grpc"]).frontends == ("grpc",)
    assert load_config(env={}, flags={"frontends": "grpc,openai"}).frontends == ("grpc", "openai")


def test_optional_ints_accept_none_text() -> None:
    cfg = load_config(env={"MINISGL_NUM_PAGES": "512"}, overrides=["max_seq_len_override=none"])
    assert cfg.num_pages == 512 and cfg.max_seq_len_override is None


def test_env_ignores_unrelated_minisgl_variables() -> None:
    env = {"MINISGL_LOAD_PLUGINS": "", "MINISGL_STRICT_PLUGINS": "1", "MINISGL_CONFIG": "x.toml"}
    assert load_config(env=env) == LaunchConfig()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["prot=9000"], 'unknown config key "prot" (-s prot=9000); did you mean "port"?'),
        (["port=eighty"], 'port must be an integer, got "eighty" (-s port=eighty)'),
        (["dtype=float23"], 'dtype must be one of float32, float16, bfloat16, auto, got "float23"; '
                            'did you mean "float32"?'),
        (["cache=radixx"], 'did you mean "radix"?'),
        (["tp=0"], "tp must be at least 1, got 0"),
        (["port.x=1"], '"port" is not a table'),
        (["transports.zmq=1"], "-s transports.<name>.<key>=VALUE expected"),
        (["nonsense"], '-s takes KEY=VALUE, got "nonsense"'),
        (["frontend=openai,openai"], "frontend lists a frontend twice"),
        (["frontend=,"], "frontend must name at least one frontend"),
        (["speculative=ngrm"], 'did you mean "ngram"?'),
        (["num_speculative_tokens=0"], "num_speculative_tokens must be at least 1"),
        (["prompt_lookup_min=3", "prompt_lookup_max=2"], "prompt_lookup_min <= prompt_lookup_max"),
    ],
)
def test_override_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides=overrides)
    assert message in str(info.value)


def test_unknown_key_in_file_names_the_file_and_suggests(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('transprot = "zmq"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert f'unknown config key "transprot" (config file {path}); did you mean "transport"?' in (
        message)
    assert "known keys:" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('port = "8000"', "port must be an integer, got '8000'"),
        ("model = 3", "model must be a string"),
        ("frontend = [1]", "frontend must be a list of names"),
        ("tp = true", "tp must be an integer"),
        ("transports = 3", "transports must be a table of tables"),
        ("[transports]\nlinger_ms = 0", "transports must be a table of tables"),
        ("port = ", "is not valid TOML"),
    ],
)
def test_file_type_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert message in str(info.value)


def test_env_type_error_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"\(environment MINISGL_PORT\)"):
        load_config(env={"MINISGL_PORT": "http"})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.toml", env={})


def test_toml_output_reads_back_to_an_equal_config(toml_file: Path, tmp_path: Path) -> None:
    cfg = load_config(toml_file, env={}, overrides=['frontends.openai."x-y".z=1', "num_pages=64"])
    text = to_toml(cfg)
    tomllib.loads(text)  # valid TOML
    out = tmp_path / "out.toml"
    out.write_text(text)
    assert load_config(out, env={}) == cfg
    assert from_file_form(json.loads(to_json(cfg))) == cfg


def test_config_is_frozen_picklable_and_owns_its_tables() -> None:
    tables = {"zmq": {"linger_ms": 0}}
    cfg = LaunchConfig(transports=tables, frontends=["openai"])  # type: ignore[arg-type]
    tables["zmq"]["linger_ms"] = 99
    assert cfg.transport_table("zmq") == {"linger_ms": 0}
    assert cfg.frontends == ("openai",)
    with pytest.raises(AttributeError):
        cfg.tp = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_direct_construction_is_checked() -> None:
    with pytest.raises(ConfigError, match="tp must be an integer"):
        LaunchConfig(tp="two")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown config key"):
        from_file_form({"prot": 1})


def test_served_model_name_takes_a_comma_list() -> None:
    cfg = load_config(env={}, flags={"served_model_name": "main, alias-1"})
    assert cfg.served_model_name == ("main", "alias-1")
    assert load_config(env={"MINISGL_SERVED_MODEL_NAME": "x"}).served_model_name == ("x",)
    assert load_config(env={}).served_model_name == ()


def test_every_frontend_shorthands_wait_for_the_default_frontend(toml_file: Path) -> None:
    cfg = load_config(env={"MINISGL_HOST": "0.0.0.0"},
                      overrides=["frontends.acme.host=::1", "frontends.acme.port=1"])
    assert cfg.frontends is None and cfg.frontend_table("anything") == {"host": "0.0.0.0"}
    # a later layer's --host still wins over an earlier layer's own table, and the reverse
    assert cfg.frontend_table("acme") == {"host": "::1", "port": 1}
    later = load_config(env={}, flags={"host": "10.0.0.1"}, overrides=["frontends.acme.port=1"])
    chosen = later.with_plugin_defaults("zmq", ("acme",))
    assert chosen.frontends == ("acme",) and chosen.frontend_table("acme") == {
        "port": 1, "host": "10.0.0.1"}
    assert "*" not in chosen.frontends_options
    named = load_config(toml_file, env={}).with_plugin_defaults("zmq", ("acme",))
    assert (named.transport, named.frontends) == ("nng", ("openai", "grpc"))  # the file's


def test_speculation_keys_reach_the_engine_config() -> None:
    from minisgl_core.engine.config import EngineConfig

    cfg = load_config(env={}, overrides=["speculative=ngram", "num_speculative_tokens=6",
                                         "prompt_lookup_max=3"])
    assert (cfg.speculative, cfg.num_speculative_tokens, cfg.prompt_lookup_max) == ("ngram", 6, 3)
    assert load_config(env={}).speculative is None  # off by default
    with pytest.raises(ValueError, match="speculative"):
        EngineConfig(model="m", speculative="eagle")


def test_dp_keys_are_checked() -> None:
    from minisgl_core.service.launcher import replica_cpus

    cfg = LaunchConfig(dp=2, dp_cpus="0-1;2,3", dp_policy="round_robin")
    assert cfg.dp_cpu_sets() == [{0, 1}, {2, 3}]
    assert replica_cpus(cfg) == [(0, 1), (2, 3)]
    assert replica_cpus(LaunchConfig(dp=2, dp_cpus="none")) == [(), ()]
    auto = replica_cpus(LaunchConfig(dp=2))  # this process's cores, split in two runs
    assert len(auto) == 2 and all(auto)
    for bad, message in [({"dp": 0}, "dp must be at least 1"),
                         ({"dp": 2, "dp_cpus": "0-1"}, "dp_cpus must list 2 core sets"),
                         ({"dp": 2, "dp_cpus": "a;b"}, "dp_cpus must list 2 core sets"),
                         ({"dp_policy": "random"}, "dp_policy must be one of"),
                         ({"dp": 2, "tp_local_ranks": "0", "tp": 2, "dist_port": 5000},
                          "every tensor-parallel rank on this host")]:
        with pytest.raises(ConfigError, match=message):
            LaunchConfig(**bad)


def test_compile_is_a_boolean_key_from_every_layer(tmp_path: Path) -> None:
    assert load_config(env={}).compile is None  # auto by default: the engine decides
    assert load_config(env={"MINISGL_COMPILE": "0"}, overrides=["compile=auto"]).compile is None
    assert load_config(env={"MINISGL_COMPILE": "1"}).compile is True
    assert load_config(env={}, flags={"compile": True}).compile is True
    assert load_config(env={"MINISGL_COMPILE": "on"}, overrides=["compile=false"]).compile is False
    path = tmp_path / "c.toml"
    path.write_text("compile = true\n")
    assert load_config(path, env={}).compile is True
    path.write_text('compile = "yes"\n')  # a file says what it means: a TOML boolean
    with pytest.raises(ConfigError, match="compile must be true or false"):
        load_config(path, env={})
    with pytest.raises(ConfigError, match=r"compile must be true or false, or auto, got 'maybe'"):
        load_config(env={}, overrides=["compile=maybe"])
    cfg = load_config(env={}, overrides=["compile=true"])
    path.write_text(to_toml(cfg))  # the dump writes it as a TOML boolean, which reads back
    assert load_config(path, env={}) == cfg
