"""The transport benchmark runs end to end on a small case and reports sane figures."""

from __future__ import annotations

import json

import pytest

from minisgl_core.bench import transport as bench


def test_inproc_and_the_queue_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["inproc"], [64, 2048], json_lines=True, duration=0.05)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    cases = {(r["transport"], r["mode"], r["size"]) for r in rows}
    assert cases == {("inproc", m, s) for m in ("sync", "async") for s in (64, 2048)} | {
        ("mp.Queue", "sync", 64), ("mp.Queue", "sync", 2048)}
    for r in rows:
        assert 0 < r["p50_us"] <= r["p99_us"] and r["round_trips"] > 0
        assert r["msgs_per_s"] > 0 and r["mb_per_s"] > 0
        assert r["p50_vs_zmq"] is None  # zmq was not part of this run
    assert {r["peer"] for r in rows if r["transport"] == "inproc"} == {"thread"}


def test_medians_and_ratios() -> None:
    def row(name: str, p50: float, rate: float) -> bench.Row:
        return bench.Row(name, "process", "sync", 64, p50, p50 * 2, 10, rate, rate * 64 / 1e6,
                         None, None)

    runs = [[row("zmq", 10, 1000), row("nng", 30, 100)],
            [row("zmq", 20, 3000), row("nng", 50, 300)],
            [row("zmq", 12, 2000), row("nng", 40, 200)]]
    out = {r.transport: r for r in bench.median_rows(runs)}
    assert out["zmq"].p50_us == 12 and out["zmq"].msgs_per_s == 2000
    assert out["nng"].p50_vs_zmq == round(40 / 12, 2) and out["nng"].thr_vs_zmq == 0.1
    text = bench.table(list(out.values()))
    assert "| nng | ipc | process | sync | 64 B | 40.0 |" in text and "3.33x" in text


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="message sizes"):
        bench.run(["inproc"], [0], 0.01)


def test_tcp_with_and_without_keys_beside_ipc(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["zmq", "nng"], [64], json_lines=True, duration=0.05, endpoints="tcp", auth=True)
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    cases = {(r["transport"], r["endpoints"], r["mode"]) for r in rows}
    assert cases == {(t, e, m) for t in ("zmq", "nng") for e in ("ipc", "tcp", "tcp+auth")
                     for m in ("sync", "async")} | {
        ("mp.Queue", "ipc", "sync"), ("socket", "ipc", "sync"), ("socket", "tcp", "sync")}
    for r in rows:
        assert 0 < r["p50_us"] <= r["p99_us"] and r["msgs_per_s"] > 0
        assert r["p50_vs_zmq"] is not None  # zmq over ipc is the reference of every row
