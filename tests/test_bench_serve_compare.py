"""`minisgl bench compare`: transport selection, and one small real run on the tiny model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from minisgl_core.bench import ceilings, compare, compare_service

pytestmark = pytest.mark.usefixtures("short_bench_samples")  # conftest.py


def test_only_multiprocess_transports() -> None:
    names = compare.multiprocess_transports()
    assert {"zmq", "nng"} <= set(names)
    assert "inproc" not in names
    assert compare.multiprocess_transports(["nng"]) == ["nng"]
    with pytest.raises(ValueError, match="inproc only works inside one process"):
        compare.multiprocess_transports(["inproc"])
    with pytest.raises(LookupError, match='did you mean "zmq"'):
        compare.multiprocess_transports(["zmqq"])


@pytest.mark.slow
def test_compare_writes_results(tmp_path: Path) -> None:
    from minisgl_core.testing.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny-llama", "llama")
    out = tmp_path / "results"
    args = ["-s", "num_pages=64", "-s", "max_seq_len_override=256"]
    results = compare.main(["zmq"], [1, 2], 4, 4, str(model), out, launch_args=args,
                           command="minisgl bench compare --test", progress=False, repeat=2)
    assert json.loads((out / "results.json").read_text()) == results
    (svc,) = results["service"]
    assert svc["transport"] == "zmq" and svc["exit_code"] == 0
    assert 0 <= svc["idle_cpu_pct_before"] < 200 and 0 <= svc["idle_cpu_pct_after"] < 200
    for level, c in zip(svc["levels"], [1, 2], strict=True):
        assert (level["concurrency"], level["failures"], level["output_tokens"]) == (c, 0, 16)
    # offline: whole batches, at least 4 requests per batch size
    assert [(lv["concurrency"], lv["requests"], lv["output_tokens"])
            for lv in results["offline"]] == [(1, 4, 16), (2, 4, 16)]
    # the service and the offline engine saw the same prompts (same chat template)
    assert results["offline"][0]["prompt_tokens"] == svc["levels"][0]["prompt_tokens"]
    # and it runs what the service runs with the same settings: no flags is auto everywhere
    for key in ("dtype", "quantization", "kv_cache_dtype", "kernels", "compile", "weight_bytes"):
        assert results["offline_meta"][key] == svc["meta"][key], key
    md = (out / "results.md").read_text()
    assert "`minisgl bench compare --test`" in md
    rows = [line for line in md.splitlines() if line.startswith("|") and "---" not in line]
    # 2 levels, the idle row and the CPU-per-token row
    assert sum(row.split("|")[1].strip() == "zmq" for row in rows) == 4
    # each level ran twice per engine; the reported one is one of those runs
    assert [len(runs) for runs in svc["runs"]] == [2, 2]
    assert all(lv in runs for lv, runs in zip(svc["levels"], svc["runs"], strict=True))
    assert [len(runs) for runs in results["offline_runs"]] == [2, 2]
    cpu = svc["cpu_us_per_token"]
    assert cpu["minisgl::scheduler"] > 0 and cpu["client"] > 0 and "launcher" in cpu
    assert sum(row.split("|")[1].strip() == "offline engine" for row in rows) == 2
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the host's ceilings were measured in the same run, and every row is a share of them
    host = results["ceilings"]
    assert host["read_gb_s"] > 0 and host["fp32_gflop_s"] > 0 and host["quantization"] == "fp32"
    assert set(host["roofline_tok_s"]) == {"1", "2"}
    # the offline row's roofline is of the bytes its engine's weights hold (bf16 or fp32)
    own = replace(ceilings.config_cost(str(model)),
                  weight_bytes=int(results["offline_meta"]["weight_bytes"]))
    best = ceilings.Ceilings(2, host["read_gb_s"], host["fp32_gflop_s"], host["int8_gop_s"],
                             host["bf16_gflop_s"])
    assert host["roofline_tok_s"]["1"] == pytest.approx(own.roofline(best, 1)[0])
    assert "Host ceilings, measured in this run" in md
    # measured before and after the levels; the rooflines use the better reading
    reads = host["read_gb_s_readings"]
    assert len(reads) == 2 and host["read_gb_s"] == max(reads) and "before and after" in md


def test_unknown_mode_exits_2_naming_the_modes() -> None:
    from typer.testing import CliRunner

    from minisgl_core.cli.app import make_app
    from minisgl_core.plugin.loading import build_manager

    result = CliRunner().invoke(make_app(build_manager()),
                                ["bench", "compare", "--mode", "int4", "--mode", "fp8"])
    assert result.exit_code == 2
    output = " ".join(result.output.replace("│", " ").split())
    assert "unknown mode 'fp8': known modes are default, fp32, bf16, int8, int8-wo, int4" in output


def test_extra_body_must_be_a_json_object() -> None:
    from typer.testing import CliRunner

    from minisgl_core.cli.app import make_app
    from minisgl_core.plugin.loading import build_manager

    app = make_app(build_manager())
    for value, message in (("{temperature", "not JSON"), ("[1]", "must be a JSON object")):
        result = CliRunner().invoke(app, ["bench", "compare", "--extra-body", value])
        assert result.exit_code == 2
        assert message in " ".join(result.output.replace("│", " ").split())


@pytest.mark.parametrize(("meta", "scheme"), [
    ({"dtype": "float32", "quantization": "none"}, "fp32"),
    ({"dtype": "bfloat16", "quantization": "none"}, "bf16"),
    ({"dtype": "bfloat16", "quantization": "int4"}, "int4"), ({}, "fp32")])
def test_the_weight_format_a_service_reports(meta: dict[str, str], scheme: str) -> None:
    assert compare_service.scheme_of(meta) == scheme


def test_a_service_that_says_its_weight_bytes_gets_their_roofline() -> None:
    def service(label: str, meta: dict[str, str]) -> compare_service.ServiceUnderTest:
        return compare_service.ServiceUnderTest(label, None, 1.0, 0.0, 0.0,
                                                compare_service.scheme_of(meta), meta)

    int4 = {"dtype": "bfloat16", "quantization": "int4", "weight_bytes": "1104500000"}
    bf16 = {"dtype": "bfloat16", "quantization": "none", "weight_bytes": "3400000000"}
    said = compare_service.service_bytes([service("zmq gguf Q4_0", int4),
                                          service("zmq", bf16), service("old", {})])
    assert said == {"zmq gguf Q4_0": ("int4", 1_104_500_000)}  # bf16's as its scheme's: none


def test_each_row_is_a_share_of_its_own_weight_formats_roofline() -> None:
    from minisgl_core.bench.compare_report import markdown

    level = {"concurrency": 1, "output_tok_s": 50.0, "req_s": 1.0, "failures": 0,
             **{f"{k}_{p}_ms": 1.0 for k in ("ttft", "tpot", "e2e") for p in ("p50", "p99")}}
    engine = {"startup_s": 1.0, "rss_mb": 1.0, "idle_cpu_pct_before": 0.0,
              "idle_cpu_pct_after": 0.0, "load_avg": 0.0, "levels": [level]}
    results = {
        "command": "c", "model": "m", "max_tokens": 4, "prompt": "p", "date": "d",
        "machine": {"cpus": 2, "processor": "x", "machine": "x"}, "offline": [],
        "service": [{**engine, "transport": "zmq fp32", "scheme": "fp32"},
                    {**engine, "transport": "zmq int4", "scheme": "int4"},
                    {**engine, "transport": "zmq bf16", "scheme": "bf16"},
                    {**engine, "transport": "zmq gguf Q4_0", "scheme": "int4"}],
        "ceilings": {"threads": 2, "read_gb_s": 40.0, "fp32_gflop_s": 100.0, "int8_gop_s": 1.0,
                     "quantization": "fp32", "roofline_tok_s": {"1": 100.0},
                     "bound": {"1": "bandwidth"},
                     "rooflines": {"int4": {"tok_s": {"1": 500.0}, "bound": {"1": "bandwidth"}},
                                   # a service's own bytes, by its label (service_bytes)
                                   "zmq gguf Q4_0": {"tok_s": {"1": 250.0},
                                                     "bound": {"1": "bandwidth"}}}}}
    table = [line.split("|") for line in markdown(results).splitlines()
             if line.count("|") == 14 and line.split("|")[1].strip().startswith("zmq")]
    rows = {cells[1].strip(): cells[5].strip() for cells in table}  # "% of host ceiling"
    assert rows == {"zmq fp32": "50.0", "zmq int4": "10.0", "zmq bf16": "-",
                    "zmq gguf Q4_0": "20.0"}
    assert "streaming chat, greedy;" in markdown(results)
    sampled = markdown({**results, "extra_body": {"temperature": 1.0}})
    assert 'streaming chat, requests with {"temperature": 1.0};' in sampled
    paced = markdown({**results, "request_rate": 2.5})
    assert "streaming chat, greedy, sent at 2.5/s (Poisson arrivals);" in paced


@pytest.mark.slow
def test_modes_are_measured_side_by_side(tmp_path: Path) -> None:
    from minisgl_core.testing.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny-llama", "llama")
    args = ["-s", "num_pages=64", "-s", "max_seq_len_override=256"]
    results = compare.main(["zmq"], [2], 2, 4, str(model), tmp_path / "out", launch_args=args,
                           command="c", progress=False, modes=["fp32", "int8-wo"],
                           extra_body={"temperature": 1.0, "top_p": 0.9})
    assert [(s["transport"], s["scheme"], s["levels"][0]["output_tokens"])
            for s in results["service"]] == [("zmq fp32", "fp32", 8), ("zmq int8-wo", "int8-wo", 8)]
    assert results["offline"] == []  # one offline engine per mode would double the run
    # each scheme's from the config, and each service's from the bytes its meta says
    assert set(results["ceilings"]["rooflines"]) == {"fp32", "int8-wo", "zmq fp32",
                                                     "zmq int8-wo"}
    assert results["service"][0]["meta"]["dtype"] == "float32"  # as /v1/models says
    assert results["extra_body"] == {"temperature": 1.0, "top_p": 0.9}  # sampled requests
