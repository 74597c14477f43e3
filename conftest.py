"""Suite-wide options: ``--busy`` runs every test beside CPU hogs, as on a loaded CI runner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_HOGS: list[subprocess.Popen[bytes]] = []

# Services the tests start serve eagerly unless a test asks for compiled steps: compiling in the
# background (a minute of CPU a model) in every one would slow the whole suite. The compiled
# step and its default have tests of their own (tests/engine/test_engine_compiled.py).
os.environ.setdefault("MINISGL_COMPILE", "false")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--busy", nargs="?", type=int, const=-1, default=None, metavar="N",
        help="keep N busy-looping processes running for the whole session (default: one per "
             "core), so timing-dependent tests show themselves on a loaded machine")


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("busy")
    if count is None or hasattr(config, "workerinput"):
        return
    count = (os.cpu_count() or 2) if count < 0 else count
    for _ in range(count):
        # a pure-Python spin, niced like nothing: it competes with the tests as an equal
        _HOGS.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                      stdin=subprocess.DEVNULL, start_new_session=True))


def pytest_report_header(config: pytest.Config) -> str | None:
    return f"busy: {len(_HOGS)} CPU hog processes running beside the tests" if _HOGS else None


def pytest_unconfigure(config: pytest.Config) -> None:
    while _HOGS:
        hog = _HOGS.pop()
        hog.kill()
        hog.wait()


@pytest.fixture
def short_bench_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """`minisgl bench compare` samples each service's idle CPU for half a second, not three,
    and the benchmarks in this process measure each host ceiling over 0.2 s, not 1.5 (three
    runs at least): the tests check that they are measured, not the figures (eight seconds a
    service and twelve a `bench compare` otherwise)."""
    from minisgl_core.bench import ceilings, compare_service

    monkeypatch.setattr(compare_service, "IDLE_SAMPLE_S", 0.5)
    monkeypatch.setattr(compare_service, "IDLE_SETTLE_S", 0.2)
    monkeypatch.setattr(ceilings, "MEASURE_S", 0.2)
