"""How long the scheduler's idle OpenMP threads spin before they sleep: briefly, so that the
service's other processes find a free core between two decode steps."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

# libgomp's busy-wait is a count of spin-wait hints (PAUSE loops) before an idle thread sleeps;
# a hint takes ~24 ns on the 2-core AMD EPYC Zen 5 and ~10 on the Intel Xeon with AMX, so the
# spin is set as a time and counted here. Libgomp's default, 300,000 (~7 ms on the Zen 5), keeps
# the step's second thread spinning on its core through the gap between two decode steps, where
# the scheduler's sends, the detokenizer, the frontend and the client then take a core from a
# thread of the step. ~24 us outlasts the gaps between the step's own parallel regions (~11 us
# between two matmuls at one request), so the step still finds its threads awake; ~10 us does
# not (docs/design/serving.md, "The scheduler's idle threads").
SPIN_US = 24.0
FALLBACK_COUNT = 1000  # where the hint cannot be timed: the count chosen on the Zen 5
LIBGOMP_DEFAULT = 300_000
OWN_KNOBS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # the user chose how OpenMP threads wait


def spin_count(hint_ns: float | None) -> int:
    """Hints in SPIN_US at ``hint_ns`` each, to two significant digits (a count that reads the
    same from one start to the next), at most libgomp's default; FALLBACK_COUNT where unknown."""
    if hint_ns is None:
        return FALLBACK_COUNT
    return min(LIBGOMP_DEFAULT, max(10, int(float(f"{SPIN_US * 1000.0 / hint_ns:.2g}"))))


def _hint_ns() -> float | None:
    from minisgl_core.kernels.native import pause  # ctypes and a compiler: not on import

    return pause.spin_hint_ns()


def short_spin(env: MutableMapping[str, str]) -> None:
    """Set ``GOMP_SPINCOUNT`` in ``env`` to a spin of ~SPIN_US on this CPU (before torch loads
    libgomp, which reads it once) unless the user set it or ``OMP_WAIT_POLICY``."""
    if not any(knob in env for knob in OWN_KNOBS):
        env["GOMP_SPINCOUNT"] = str(spin_count(_hint_ns()))


def describe(env: Mapping[str, str]) -> str:
    """How this process's OpenMP threads wait, for the log and ``/v1/models`` meta."""
    knobs = [f"{knob}={env[knob]}" for knob in OWN_KNOBS if knob in env]
    if not knobs:
        return "libgomp's default spin (GOMP_SPINCOUNT unset)"
    # the hint is timed only for a count short_spin could have set
    ours = len(knobs) == 1 and "GOMP_SPINCOUNT" in env
    hint_ns = _hint_ns() if ours else None
    count = spin_count(hint_ns)
    if not ours or env["GOMP_SPINCOUNT"] != str(count):
        return " ".join(knobs) + " (the environment's)"
    timed = (f"~{SPIN_US:.0f} us at {hint_ns:.1f} ns a spin here" if hint_ns is not None
             else "the spin-wait hint could not be timed here")
    return (f"GOMP_SPINCOUNT={count}: idle threads spin {timed}, then sleep, freeing their core "
            "between steps (set GOMP_SPINCOUNT to change)")
