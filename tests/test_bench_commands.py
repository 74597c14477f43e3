"""Every `minisgl bench` command: its help, and one real run through the command line on the
smallest input (tiny models, a couple of requests). The commands that start services of their
own (structured, dp, fleet, compare) run in test_bench_command_services.py, serve in
test_bench_serve.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from minisgl_core.cli.app import make_app
from minisgl_core.cli.bench_commands import COMMANDS
from minisgl_core.plugin.loading import build_manager
from minisgl_core.testing.service import RunningService, launch_service

pytestmark = pytest.mark.usefixtures("short_bench_samples")  # conftest.py

SERVICE_ARGS = ["--max-seq-len-override", "512", "--num-pages", "256", "--page-size", "16"]
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from minisgl_core.testing.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama", "llama")


@pytest.fixture(scope="module")
def service(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[RunningService]:
    svc = launch_service(str(tiny_model), args=SERVICE_ARGS,
                         log_dir=tmp_path_factory.mktemp("logs"))
    try:
        yield svc
    finally:
        svc.stop()


def invoke(*args: str) -> Result:
    result = runner.invoke(make_app(build_manager(), plugin_commands=False), ["bench", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def bench(*args: str) -> tuple[int, str]:
    """``minisgl bench ARGS`` in this process: exit code and what it printed."""
    result = invoke(*args)
    return result.exit_code, result.output


def bench_rows(*args: str) -> tuple[int, str, list[dict[str, object]]]:
    """``bench`` and the JSON rows of its stdout alone (a progress bar on stderr may share a
    line with a row in the mixed output)."""
    result = invoke(*args)
    return result.exit_code, result.output, json_lines(result.stdout)


def json_lines(output: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def number(value: object) -> float:
    """A JSON number from a printed row (a test failure, not a crash, when it is not one)."""
    assert isinstance(value, int | float), value
    return float(value)


def test_every_benchmark_is_a_bench_command() -> None:
    assert set(COMMANDS) == {"transport", "offline", "quality", "speculative", "kernels",
                             "prefix", "serve", "compare", "perplexity", "rss", "structured",
                             "structured-speed", "fleet", "dp"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help(name: str) -> None:
    code, output = bench(name, "--help")
    assert code == 0, output
    assert f"minisgl bench {name}" in output


@pytest.mark.parametrize(("args", "message"), [
    (["offline", "--quantization", "int9"], '--quantization must be fp32, int8, int8-wo or int4'),
    (["speculative", "--dtype", "float23"], '--dtype must be float32, bfloat16 or auto'),
    (["quality", "--peer", "vllm"], '--peer must be llamacpp'),
    (["kernels", "--isa", "neon"], '--isa must be c, avx2 or avx512'),
    (["transport", "--endpoints", "udp"], '--endpoints must be ipc or tcp'),
])
def test_bad_options_are_refused_before_anything_loads(args: list[str], message: str) -> None:
    code, output = bench(*args)
    assert (code, message in output) == (2, True), output


def test_transport_repeat_reports_medians() -> None:
    code, output = bench("transport", "--transport", "inproc", "--size", "64", "--duration",
                         "0.05", "--repeat", "2", "--json")
    assert code == 0, output
    rows = json_lines(output)
    assert {(r["transport"], r["mode"]) for r in rows} >= {("inproc", "sync"),
                                                           ("inproc", "async")}
    assert all(r["size"] == 64 and r["round_trips"] > 0 for r in rows)


def test_prefix_chats_takes_the_workload_options(tiny_model: Path) -> None:
    code, output = bench("prefix", "--chats", "--model", str(tiny_model), "--requests", "2",
                         "--system-tokens", "40", "--max-tokens", "2", "--arrival", "sequential",
                         "--threads", "1", "--json")
    assert code == 0, output  # radix gave the same greedy tokens as naive
    rows = json_lines(output)
    assert sorted(r["cache"] for r in rows) == ["naive", "radix"]
    assert {(r["arrival"], r["requests"]) for r in rows} == {("sequential", 2)}
    naive, radix = sorted(rows, key=lambda r: str(r["cache"]))
    assert naive["prompt_tokens"] == radix["prompt_tokens"] > 2 * 40
    assert radix["prefill_tokens"] < naive["prefill_tokens"]  # the second reuses the system prompt


def test_prefix_refuses_an_unknown_arrival() -> None:
    code, output = bench("prefix", "--chats", "--arrival", "bursty")
    assert code == 2
    assert "sequential or burst" in output


def test_rss_reports_each_process_and_the_total(tiny_model: Path) -> None:
    code, output = bench("rss", "--model", str(tiny_model), "--json", "--", *SERVICE_ARGS)
    assert code == 0, output
    *processes, total = json_lines(output)
    assert len(processes) >= 2  # the launcher and its children
    assert all(float(p["rss_mib"]) > 0 for p in processes)  # type: ignore[arg-type]
    assert total["total_rss_mib"] == pytest.approx(
        sum(float(p["rss_mib"]) for p in processes), abs=0.1)  # type: ignore[arg-type]


def test_perplexity_scores_a_served_model(tiny_model: Path) -> None:
    code, output = bench("perplexity", "--model", str(tiny_model), "--tokens", "64", "--json")
    assert code == 0, output
    (row,) = json_lines(output)
    assert row["tokens"] == 64
    assert float(row["perplexity"]) > 1  # type: ignore[arg-type]
    assert float(row["bits_per_byte"]) > 0  # type: ignore[arg-type]


def test_structured_speed_against_a_running_service(service: RunningService) -> None:
    code, output = bench("structured-speed", "--url", service.url, "--requests", "2",
                         "--max-tokens", "4")
    assert code == 0, output
    for name in ("free", "constrained", "mixed_free", "mixed_constrained"):
        assert any(line.startswith(name + " ") for line in output.splitlines()), name
    (ratios,) = json_lines(output)
    assert set(ratios) == {"constrained_vs_free_tpot", "free_beside_constrained_vs_free_tpot",
                           "mixed_constrained_vs_mixed_free_tpot"}



def test_offline_reports_the_engine_beside_transformers(tiny_model: Path) -> None:
    code, output, rows = bench_rows("offline", "--model", str(tiny_model), "--batch-size", "1",
                                    "--batch-size", "2", "--max-tokens", "4", "--no-ceilings",
                                    "--threads", "1", "--json")
    assert code == 0, output
    assert [(r["batch"], r["max_tokens"], r["system"]) for r in rows] == [(1, 4, "fp32"),
                                                                           (2, 4, "fp32")]
    assert all(number(r["engine_tok_s"]) > 0 and number(r["hf_tok_s"]) > 0 for r in rows)


def test_quality_puts_int8_beside_fp32(tiny_model: Path) -> None:
    code, output, rows = bench_rows("quality", "--model", str(tiny_model), "--tokens", "64",
                                    "--quantization", "int8", "--threads", "1", "--json")
    fp32, int8 = rows
    assert (fp32["system"], int8["system"]) == ("fp32", "int8")
    assert fp32["tokens"] == int8["tokens"] == 64
    # fp32 is the reference the others' greedy chats are compared with
    assert (fp32["agreement"], fp32["chats_equal"]) == (1.0, fp32["chats"])
    assert 0 <= number(int8["agreement"]) <= 1
    assert number(fp32["perplexity"]) > 1 and number(int8["perplexity"]) > 1
    # a random tiny model does not answer Paris: the run says so by its exit code
    assert (fp32["paris"], code) == (False, 1), output


def test_speculative_runs_each_workload_plain_and_with_ngram(tiny_model: Path) -> None:
    code, output, rows = bench_rows("speculative", "--model", str(tiny_model), "--requests",
                                    "2", "--max-tokens", "8", "--concurrency", "1", "--threads",
                                    "1", "--repeat", "1", "--json")
    assert code == 0, output  # ngram gave the plain engine's greedy tokens
    assert {(r["workload"], r["speculative"]) for r in rows} == {
        ("repeating", False), ("repeating", True), ("stories", False), ("stories", True)}
    assert all(r["tokens"] == 2 * 8 and r["concurrency"] == 1 for r in rows)
    assert all(r["drafted"] == 0 for r in rows if not r["speculative"])
    assert all(0 <= number(r["accepted"]) <= number(r["drafted"]) for r in rows)


def test_kernels_times_each_scheme_and_row_count(tiny_model: Path) -> None:
    from minisgl_core.kernels.native import library

    if library.library() is None:
        pytest.skip(f"no native library here: {library.failure()}")
    code, output, rows = bench_rows("kernels", "--model", str(tiny_model), "--rows", "1",
                                    "--rows", "3", "--repeat", "1", "--threads", "1", "--json")
    assert code == 0, output
    assert {(r["scheme"], r["rows"]) for r in rows} == {("int8-wo", 1), ("int8-wo", 3),
                                                        ("int4", 1), ("int4", 3)}
    widest = {v: k for k, v in library.ISAS.items()}[library.best_isa()]
    assert all(r["path"] == widest and number(r["ms"]) > 0 for r in rows)
