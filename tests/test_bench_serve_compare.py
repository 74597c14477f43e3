"""`minisgl bench compare`: transport selection, and one small real run on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minisgl_core.bench import compare


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
    assert "Host ceilings, measured in this run" in md
