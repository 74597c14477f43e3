"""The scheduler's idle OpenMP threads: a short spin unless the user chose how they wait."""

from __future__ import annotations

import subprocess
import sys

from minisgl_core.service import omp_wait


def test_a_scheduler_gets_the_short_spin_when_nothing_is_set() -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    omp_wait.short_spin(env)
    assert env == {"PATH": "/bin", "GOMP_SPINCOUNT": str(omp_wait.SPIN_COUNT)}
    assert omp_wait.describe(env).startswith(f"GOMP_SPINCOUNT={omp_wait.SPIN_COUNT}: idle")


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
