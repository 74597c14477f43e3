"""The `minisgl bench` commands that start services of their own (or need one with tools):
structured, dp, fleet and compare, each run once through the command line on the tiny model
at its smallest sizes, their printed (or written) results checked."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from minisgl_core.cli.app import make_app
from minisgl_core.plugin.loading import build_manager
from minisgl_core.testing.service import RunningService, launch_service

pytestmark = pytest.mark.usefixtures("short_bench_samples")  # conftest.py

runner = CliRunner()


def bench(*args: str) -> Result:
    """``minisgl bench ARGS`` in this process."""
    result = runner.invoke(make_app(build_manager(), plugin_commands=False), ["bench", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def table_rows(text: str, columns: int) -> list[list[str]]:
    """The body rows of every markdown table in ``text`` with ``columns`` columns."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("|") and "---" not in line]
    return [r for r in rows if len(r) == columns and r[0] != "setup"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from minisgl_core.testing.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama")


@pytest.fixture(scope="module")
def tools_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """The tiny model with a 4096-token context: its tokenizer spends about a token per
    character, and the structured benchmark's tool sets render to more than 512."""
    from minisgl_core.testing.tiny import make_tiny_model

    path = make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-long", "llama")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}))
    svc = launch_service(str(path), log_dir=tmp_path_factory.mktemp("logs"),
                         args=["--max-seq-len-override", "4096", "--num-pages", "1024"])
    try:
        yield svc
    finally:
        svc.stop()


def test_structured_validates_every_schema_and_tool_call(tools_service: RunningService) -> None:
    from minisgl_core.bench.structured_schemas import SCHEMAS, TOOLSETS

    result = bench("structured", "--url", tools_service.url, "--json")
    report = json.loads(result.stdout)
    summary = report["summary"]
    assert (summary["schemas"], summary["tool_requests"]) == (len(SCHEMAS), 2 * len(TOOLSETS))
    assert summary["schemas_valid"] == sum(r["ok"] for r in report["schemas"])
    assert summary["tool_calls_valid"] == sum(r["ok"] for r in report["tools"])
    # the grammar keeps a random model's answers valid; one cut by max_tokens is not counted
    assert summary["schemas_valid"] >= 1 and summary["tool_calls_valid"] >= 1
    for row in report["schemas"]:
        if row["ok"]:
            assert isinstance(json.loads(row["answer"]), dict), row
    for row in report["tools"]:
        if row["ok"]:
            assert row["calls"] and all(isinstance(json.loads(args), dict)
                                        for _, args in row["calls"]), row
    trip = report["round_trip"]
    assert isinstance(trip["ok"], bool) and isinstance(trip["auto_called"], bool)
    every = (summary["schemas_valid"], summary["tool_calls_valid"]) == (
        summary["schemas"], summary["tool_requests"])
    assert result.exit_code == (0 if every else 1), result.output


def test_dp_reports_hit_rates_and_throughput(tiny_model: Path) -> None:
    from minisgl_core.bench.fleet_dp import HIT_SETUPS, SETUPS

    result = bench("dp", "--model", str(tiny_model), "--concurrency", "2", "--waves", "1",
                   "--max-tokens", "2", "--systems", "2", "--per-system", "2",
                   "--system-words", "20")
    assert result.exit_code == 0, result.output
    hits = table_rows(result.stdout, 2)
    assert [name for name, _ in hits] == list(HIT_SETUPS)
    for _, rate in hits:
        assert re.fullmatch(r"\d+\.\d%", rate) and 0 <= float(rate[:-1]) <= 100, rate
    levels = table_rows(result.stdout, 6)
    assert [(name, c) for name, c, *_ in levels] == [(name, "2") for name in SETUPS]
    for _, _, tok_s, _, req_s, failed in levels:
        assert float(tok_s) > 0 and float(req_s) > 0 and failed == "0"


@pytest.mark.router
@pytest.mark.skipif(importlib.util.find_spec("sglang_router") is None,
                    reason="needs the router extra (sglang-router)")
def test_fleet_measures_one_service_and_two_behind_the_router() -> None:
    result = bench("fleet", "--tokens-per-s", "0", "--requests", "4", "--max-tokens", "4",
                   "--concurrency", "2")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout.splitlines()[-1])
    assert list(rows) == ["one service", "two behind the router"]
    for (level,) in rows.values():
        assert (level["concurrency"], level["completed"], level["failures"]) == (2, 4, 0)
        assert level["output_tokens"] == 4 * 4 and level["output_tok_s"] > 0
    assert len(table_rows(result.stdout, 5)) == 2


def test_compare_writes_its_results_through_the_command_line(tiny_model: Path,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = bench("compare", "--transport", "zmq", "--concurrency", "1", "--requests", "2",
                   "--max-tokens", "4", "--model", str(tiny_model), "--out", str(out),
                   "--no-offline", "--request-rate", "4", "-s", "num_pages=64",
                   "-s", "max_seq_len_override=256")
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    (svc,) = results["service"]
    assert (svc["transport"], svc["exit_code"]) == ("zmq", 0)
    (level,) = svc["levels"]
    assert (level["concurrency"], level["failures"], level["output_tokens"]) == (1, 0, 2 * 4)
    assert results["offline"] == []
    md = (out / "results.md").read_text()
    assert re.search(r"^\|\s*zmq\s*\|", md, flags=re.M)
    # open loop: both requests at their Poisson times, and the report says how they were sent
    assert results["request_rate"] == level["request_rate"] == 4.0
    assert "--request-rate=4.0" in md and "sent at 4/s (Poisson arrivals)" in md


def test_compare_serves_random_weights_at_the_shapes_of_a_config(
        tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from minisgl_core.store.dummy_models import config_spec
    from minisgl_core.testing.own_cache import own_cache_dir

    # the random model goes into a cache of this test's own
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(own_cache_dir(tmp_path / "cache")))
    config, out = tiny_model / "config.json", tmp_path / "results"
    result = bench("compare", "--model-config", str(config), "--transport", "zmq",
                   "--mode", "default", "--concurrency", "1", "--requests", "2",
                   "--max-tokens", "4", "--out", str(out),
                   "-s", "num_pages=64", "-s", "max_seq_len_override=256")
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    name = config_spec(str(config))[0]
    model_dir = tmp_path / "cache" / "dummy" / name
    assert (results["model_config"], results["model"], results["model_dir"]) == (
        str(config), name, str(model_dir))
    # the random weights at the config's shapes, beside the config, served
    assert json.loads((model_dir / "config.json").read_text())["hidden_size"] == json.loads(
        config.read_text())["hidden_size"]
    assert (model_dir / "model.safetensors").read_bytes() != (
        tiny_model / "model.safetensors").read_bytes()
    # (--gguf TYPE adds a service on the same weights as a GGUF: left out here, its conversion
    # alone takes half a minute; the GGUF writer and reader are tested in test_store_dummy_models)
    assert results["ggufs"] == {}
    (default,) = results["service"]
    assert default["transport"] == "zmq default"
    (level,) = default["levels"]
    assert (default["exit_code"], level["concurrency"], level["failures"],
            level["output_tokens"]) == (0, 1, 0, 2 * 4)
    assert f"random weights at {config}'s shapes" in (out / "results.md").read_text()
