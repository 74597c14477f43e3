"""How long the scheduler's idle OpenMP threads spin before they sleep: briefly, so that the
service's other processes find a free core between two decode steps."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

# libgomp's busy-wait, in PAUSE loops (~24 ns each on the 2-core AMD EPYC Zen 5, longer on
# Intel), before an idle thread sleeps. Its default, 300,000 (~7 ms there), keeps the step's
# second thread spinning on its core through the gap between two decode steps, where the
# scheduler's sends, the detokenizer, the frontend and the client then take a core from a thread
# of the step. 1000 (~24 us there) outlasts the gaps between the step's own parallel regions
# (~11 us between two matmuls at one request), so the step still finds its threads awake
# (docs/design/serving.md, "The scheduler's idle threads").
SPIN_COUNT = 1000
OWN_KNOBS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # the user chose how OpenMP threads wait


def short_spin(env: MutableMapping[str, str]) -> None:
    """Set ``GOMP_SPINCOUNT`` in ``env`` (before torch loads libgomp, which reads it once)
    unless the user set it or ``OMP_WAIT_POLICY``."""
    if not any(knob in env for knob in OWN_KNOBS):
        env["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def describe(env: Mapping[str, str]) -> str:
    """How this process's OpenMP threads wait, for the log and ``/v1/models`` meta."""
    knobs = [f"{knob}={env[knob]}" for knob in OWN_KNOBS if knob in env]
    if not knobs:
        return "libgomp's default spin (GOMP_SPINCOUNT unset)"
    if knobs == [f"GOMP_SPINCOUNT={SPIN_COUNT}"]:
        return (f"GOMP_SPINCOUNT={SPIN_COUNT}: idle threads sleep after ~{SPIN_COUNT} spins, "
                "freeing their core between steps (set GOMP_SPINCOUNT to change)")
    return " ".join(knobs) + " (the environment's)"
