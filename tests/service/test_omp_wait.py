"""The scheduler's idle OpenMP threads: a short spin, counted from this CPU's spin-wait hint's
measured time, unless the user chose how they wait."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from minisgl_core.kernels.native import library, pause
from minisgl_core.service import omp_wait

SPINS = platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64")
needs_probe = pytest.mark.skipif(not SPINS or library.compiler() is None,
                                 reason="no spin-wait hint here, or no C compiler")


def test_the_spin_is_a_time_counted_in_hints_of_this_cpu() -> None:
    assert omp_wait.spin_count(23.8) == 1000  # the AMD EPYC Zen 5: ~24 us
    assert omp_wait.spin_count(9.7) == 2500  # the Intel Xeon with AMX: the same ~24 us
    assert omp_wait.spin_count(140.0) == 170
    assert omp_wait.spin_count(None) == omp_wait.FALLBACK_COUNT  # not timed: the Zen 5's count
    assert omp_wait.spin_count(1e-6) == omp_wait.LIBGOMP_DEFAULT  # never longer than libgomp's


@needs_probe
def test_the_hint_is_timed_without_loading_libgomp_or_torch() -> None:
    # libgomp reads GOMP_SPINCOUNT once, when it loads: the probe must not load it first
    code = ("import sys; from minisgl_core.kernels.native import pause; ns = pause.spin_hint_ns();"
            "maps = open('/proc/self/maps').read(); "
            "print(ns, 'libgomp' in maps, 'torch' in sys.modules)")
    ns, gomp, torch = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, timeout=120, check=True).stdout.split()
    assert 0.05 < float(ns) < 1000.0  # a PAUSE is 1-150 cycles on the CPUs people rent
    assert (gomp, torch) == ("False", "False")


@needs_probe
def test_a_scheduler_gets_about_24_us_of_spin_when_nothing_is_set() -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    omp_wait.short_spin(env)
    hint_ns = pause.spin_hint_ns()
    assert hint_ns is not None
    assert env == {"PATH": "/bin", "GOMP_SPINCOUNT": str(omp_wait.spin_count(hint_ns))}
    assert 21 <= int(env["GOMP_SPINCOUNT"]) * hint_ns / 1000 <= 27 or \
        int(env["GOMP_SPINCOUNT"]) == omp_wait.LIBGOMP_DEFAULT
    assert omp_wait.describe(env).startswith(
        f"GOMP_SPINCOUNT={env['GOMP_SPINCOUNT']}: idle threads spin ~24 us at {hint_ns:.1f} ns")


def test_an_untimed_hint_falls_back_to_the_fixed_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(omp_wait, "_hint_ns", lambda: None)
    env: dict[str, str] = {}
    omp_wait.short_spin(env)
    assert env == {"GOMP_SPINCOUNT": str(omp_wait.FALLBACK_COUNT)}
    assert "could not be timed" in omp_wait.describe(env)


def test_the_users_own_setting_is_kept_and_named() -> None:
    for knob, value in (("GOMP_SPINCOUNT", "300000"), ("OMP_WAIT_POLICY", "active")):
        env = {knob: value}
        omp_wait.short_spin(env)
        assert env == {knob: value}
        assert omp_wait.describe(env) == f"{knob}={value} (the environment's)"
    assert omp_wait.describe({}) == "libgomp's default spin (GOMP_SPINCOUNT unset)"


def test_the_worker_entry_point_loads_no_torch_before_the_spin_is_set() -> None:
    # libgomp reads GOMP_SPINCOUNT once, when torch loads it: worker_main sets it first thing
    code = ("import sys, minisgl_core.service.worker, minisgl_core.service.spec; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "False"
