"""Where one decode step's time goes: matmul, attention, other ops, and Python (the rest).

The step time is the median of unprofiled decode steps; the split comes from torch.profiler's
self CPU times over as many profiled steps, so "python" (step time minus every op's time: the
interpreter, scheduling, sampling bookkeeping) is approximate. Ops are sorted by name into
matmul (dense, oneDNN, int8 and the native weight-only kernels), attention (the KV gather and
store, SDPA) and the rest (norms, rotary, SiLU x up, residual adds, sampling...).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from minisgl_core.kernels.matmul.weight_only import PROFILE_NAMES

# minisgl::native_linear's own time is the weight-only kernels' (and a little glue around them)
MATMUL = {"aten::mm", "aten::addmm", "mkldnn::_linear_pointwise", "quantized::linear_dynamic",
          "aten::_int_mm", "minisgl::native_linear", *PROFILE_NAMES}
ATTENTION = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::index_select",
             "minisgl::native_decode_attention",
             "aten::_scaled_dot_product_attention_math", "aten::bmm", "aten::_softmax",
             "aten::index_copy_", "aten::index_put_"}


def profile_decode(engine: Any, prompts: list[list[int]], steps: int = 8,
                   top: int = 0) -> dict[str, Any]:
    """Milliseconds per decode step: wall time, and op time split into matmul / attention /
    other ops / python; with ``top`` > 0 also the ``top`` costliest other ops (name -> ms)."""
    from torch.profiler import ProfilerActivity, profile

    from minisgl_core.wire.schema import SamplingParams

    sp = SamplingParams(max_tokens=2 * steps + 4, temperature=0.0, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"profile-{time.perf_counter()}-{i}", p, sp)
    while any(r.num_cached < len(r.prompt_ids) for r in engine.requests.values()):
        engine.step()  # finish every prefill first: only decode steps are measured
    walls = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        walls.append((time.perf_counter() - start) * 1e3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            engine.step()
    split = {"matmul": 0.0, "attention": 0.0, "other_ops": 0.0}
    others: dict[str, float] = {}
    for e in prof.key_averages():
        ms = e.self_cpu_time_total / 1e3 / steps
        key = "matmul" if e.key in MATMUL else "attention" if e.key in ATTENTION else "other_ops"
        split[key] += ms
        if key == "other_ops":
            others[e.key] = others.get(e.key, 0.0) + ms
    for _ in engine.run_until_idle():  # finish the profiled requests
        pass
    wall = statistics.median(walls)
    out: dict[str, Any] = {"batch": float(len(prompts)), "step_ms": wall, **split,
                           "python": max(0.0, wall - sum(split.values()))}
    if top:
        out["top_other_ops"] = dict(sorted(others.items(), key=lambda kv: -kv[1])[:top])
    return out


def format_profile(label: str, batch: int, p: dict[str, Any]) -> str:
    """One line per profile (and one more naming the costliest other ops, when collected)."""
    line = (f"decode step, {label}, batch {batch}: {p['step_ms']:.1f} ms = matmul "
            f"{p['matmul']:.1f} + attention (gather, store, sdpa) {p['attention']:.1f} + other "
            f"ops {p['other_ops']:.1f} + python {p['python']:.1f}")
    if p.get("top_other_ops"):
        line += "\n  other ops: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                              p["top_other_ops"].items())
    return line
