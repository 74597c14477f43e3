"""Where one decode step's time goes: the weights' bytes at the host's read bandwidth, then named
overheads (matmul beyond those bytes, attention, norms, rotary, SiLU x up, residual adds,
sampling, dtype conversions, ...) and Python between the ops.

The step time is the median of unprofiled decode steps. The split comes from torch.profiler over
as many profiled steps: every op's self CPU time goes to the group of the op at the top of its
call tree (``aten::rms_norm``'s inner ``pow``, ``mean`` and casts are norm time, a top-level
``aten::to`` is a dtype conversion), groups named by op in ``GROUPS``; "python/dispatch" is the
unprofiled step's time that no op accounts for (the interpreter, the engine's bookkeeping,
torch's dispatch). The profiler costs about the same for every op it records, so the profiled
step's time beyond the unprofiled one comes out of each group by its number of events (and of
python/dispatch by its calls): the parts add up to the step, and are estimates within that
cost (a microsecond or two an op on a 2-core Zen 4). The weight-bytes time is the packed
matmul weights as stored (``ceilings.model_cost``; a copy kept for many rows left out) over
the read bandwidth measured in the same run; the matmul group's time beyond it is what the
kernels spend on anything but streaming weights.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

from minisgl_core.kernels.elementwise import ROPE, SWIGLU
from minisgl_core.kernels.matmul.weight_only import PROFILE_NAMES

# minisgl::native_linear's own time is the weight-only kernels' (and a little glue around them)
MATMUL = frozenset({"aten::mm", "aten::addmm", "aten::linear", "mkldnn::_linear_pointwise",
                    "quantized::linear_dynamic", "aten::_int_mm", "minisgl::native_linear",
                    *PROFILE_NAMES})
ATTENTION = frozenset({"aten::_scaled_dot_product_flash_attention_for_cpu",
                       "aten::scaled_dot_product_attention", "aten::index_select",
                       "minisgl::native_decode_attention", "minisgl::invariant_attention",
                       "aten::_scaled_dot_product_attention_math", "aten::bmm", "aten::_softmax",
                       "aten::index_copy_", "aten::index_put_"})
NORM = "minisgl::rms_norm"  # the decoder's own RMSNorm, labelled while profiling (_labelled)
# group -> the top-level op names whose time (their children's included) is that group's; the
# decoder's and sampler's ops at batch 1 and 8 (an op named in none lands in "other ops")
GROUPS: dict[str, frozenset[str]] = {
    "matmul": MATMUL,
    "attention": ATTENTION,
    "norms": frozenset({"aten::rms_norm", "aten::_fused_rms_norm", "aten::layer_norm", NORM,
                        "aten::pow", "aten::mean", "aten::rsqrt", "aten::rsqrt_",
                        "minisgl::invariant_rms_norm"}),
    # q/k times cos and sin, the halves swapped (cat), the sum; the cos/sin rows looked up
    "rotary": frozenset({"aten::mul", "aten::cat", "aten::add", "aten::flip", "aten::index",
                         "minisgl::invariant_rope", ROPE}),
    "SiLU x up": frozenset({"aten::silu", "aten::mul_", "aten::gelu",
                            "minisgl::invariant_swiglu", SWIGLU}),
    "residual adds": frozenset({"aten::add_"}),
    "embedding": frozenset({"aten::embedding"}),
    "sampling": frozenset({"aten::max", "aten::argmax", "aten::softmax", "aten::log_softmax",
                           "aten::topk", "aten::sort", "aten::cumsum", "aten::exponential_",
                           "aten::gather", "aten::scatter_", "aten::masked_fill",
                           "aten::clamp_min_", "aten::div", "aten::amax", "aten::item",
                           "aten::_local_scalar_dense", "aten::rand", "aten::uniform_",
                           "minisgl::sample"}),
    "dtype conversions": frozenset({"aten::to", "aten::_to_copy", "aten::copy_",
                                    "aten::type_as", "aten::contiguous", "aten::clone"}),
    # the step's input tensors built from Python lists (ids, positions, slots, lengths)
    "step inputs": frozenset({"aten::lift_fresh", "aten::empty", "aten::zeros", "aten::arange",
                              "aten::full", "aten::fill_", "aten::ones", "aten::new_empty"}),
    "views": frozenset({"aten::slice", "aten::view", "aten::select", "aten::unsqueeze",
                        "aten::squeeze", "aten::as_strided", "aten::narrow", "aten::expand",
                        "aten::reshape", "aten::t", "aten::transpose", "aten::split",
                        "aten::chunk", "aten::_unsafe_view", "aten::detach", "aten::alias"}),
}
OTHER, PYTHON = "other ops", "python/dispatch"
GROUP_OF = {op: group for group, ops in GROUPS.items() for op in ops}
# A compiled step's ops run under the graph's wrappers (events of these names): an op inside
# counts for its own group, and the wrappers' own time is the code inductor generated (the norms,
# rotary, SiLU x up, residual adds and K/V store fused into loops) and the graph's guards
COMPILED = "compiled graph (fused ops, guards)"
WRAPPERS = ("Torch-Compiled Region", "## Call CompiledFxGraph", "TorchDynamo Cache Lookup",
            "AOTDispatcher", "Pregraph bytecode")


@contextlib.contextmanager
def _labelled() -> Iterator[None]:
    """While profiling, the decoder's RMSNorm runs under a profiler label: its ops are generic
    ones (mul, sum, to) that would otherwise land in other groups. The label is one more event
    of the profiler's, taken out with the rest (see the module's docstring)."""
    import torch

    from minisgl_core.engine.models import decoder

    norm = decoder.rms_norm

    # the C++ label inductor uses: about 1 us under the profiler, record_function's is 8
    label = getattr(torch._C._profiler, "_RecordFunctionFast", torch.profiler.record_function)

    def labelled(*args: Any) -> torch.Tensor:
        with label(NORM):
            return norm(*args)

    decoder.rms_norm = labelled  # the forward looks it up at each call
    try:
        yield
    finally:
        decoder.rms_norm = norm


def _root(event: Any) -> Any:
    """The op whose group ``event``'s time counts for: the top of its call tree, or inside a
    compiled graph the top op under the graph's wrappers (``event`` itself when it is one)."""
    chain = [event]
    while chain[-1].cpu_parent is not None:
        chain.append(chain[-1].cpu_parent)
    return next((e for e in reversed(chain) if not e.name.startswith(WRAPPERS)), event)


def split_ops(events: Any, steps: int
              ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Per step: milliseconds by group, events by group (the top-level ones as ``PYTHON``: a
    call from Python each), and milliseconds by top-level op name for the ops in no group."""
    groups = dict.fromkeys([*GROUPS, COMPILED, OTHER], 0.0)
    counts = dict.fromkeys([*GROUPS, COMPILED, OTHER, PYTHON], 0.0)
    others: dict[str, float] = {}
    for e in events:
        ms = e.self_cpu_time_total / 1e3 / steps
        root = _root(e)
        group = COMPILED if root.name.startswith(WRAPPERS) else GROUP_OF.get(root.name, OTHER)
        groups[group] += ms
        counts[group] += 1 / steps
        if e.cpu_parent is None:  # called from Python
            counts[PYTHON] += 1 / steps
        if group == OTHER:
            others[root.name] = others.get(root.name, 0.0) + ms
    return groups, counts, others


def unprofiled(groups: dict[str, float], counts: dict[str, float], profiled_ms: float,
               wall_ms: float) -> dict[str, float]:
    """The parts of an unprofiled step of ``wall_ms``: the profiler's cost (the profiled step's
    time beyond ``wall_ms``) is taken out of each group by its events, and python/dispatch is
    what the groups leave of the step (scaled down, when they would leave less than nothing)."""
    per_event = max(0.0, profiled_ms - wall_ms) / max(sum(counts.values()), 1.0)
    parts = {g: max(0.0, ms - per_event * counts[g]) for g, ms in groups.items()}
    ops = sum(parts.values())
    if ops > wall_ms:
        parts = {g: ms * wall_ms / ops for g, ms in parts.items()}
    parts[PYTHON] = max(0.0, wall_ms - sum(parts.values()))
    return parts


def profile_decode(engine: Any, prompts: list[list[int]], steps: int = 8, top: int = 0,
                   read_gb_s: float = 0.0) -> dict[str, Any]:
    """One decode step of ``engine`` on ``prompts`` (one request each), in milliseconds.

    ``step_ms``: the median unprofiled step; ``parts``: group -> ms, adding up to it (see the
    module's docstring), python/dispatch last; ``weight_bytes``: the packed matmul weights. With
    ``read_gb_s`` > 0 the matmul group splits into ``weight bytes`` (their time at that
    bandwidth, at most the matmul time) and ``matmul beyond weight bytes``. With ``top`` > 0,
    ``top_other_ops``: the costliest ops named in no group (name -> ms). ``events``: group ->
    profiled ops a step (a small group's time can round to 0 once the profiler's cost is out).
    """
    from torch.profiler import ProfilerActivity, profile

    from minisgl_core.bench.ceilings import model_cost
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
    # a compiled step traced the norm already (and would recompile on a new global)
    label = _labelled() if getattr(engine, "compiled", None) is None else contextlib.nullcontext()
    with label, profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            engine.step()
        profiled_ms = (time.perf_counter() - start) * 1e3 / steps
    groups, counts, others = split_ops(prof.events(), steps)
    for _ in engine.run_until_idle():  # finish the profiled requests
        pass
    wall = statistics.median(walls)
    parts = unprofiled(groups, counts, profiled_ms, wall)
    weight_bytes = model_cost(engine.model).weight_bytes
    if read_gb_s > 0:
        matmul = parts.pop("matmul")
        weights = min(matmul, weight_bytes / (read_gb_s * 1e9) * 1e3)
        parts = {"weight bytes": weights, "matmul beyond weight bytes": matmul - weights,
                 **parts}
    out: dict[str, Any] = {"batch": len(prompts), "step_ms": wall, "parts": parts,
                           "weight_bytes": weight_bytes, "read_gb_s": read_gb_s,
                           "events": counts}
    if top:
        out["top_other_ops"] = dict(sorted(others.items(), key=lambda kv: -kv[1])[:top])
    return out


def format_profile(label: str, profiles: list[dict[str, Any]]) -> str:
    """One system's profiles (one per batch size) as a table: a row per part, a column per
    batch, the step last; then the ops named in no group, when collected."""
    first = profiles[0]
    head = f"decode step, {label}, ms per step"
    if first["read_gb_s"]:
        head += (f"; weight bytes: {first['weight_bytes'] / 1e6:.1f} MB of packed matmul "
                 f"weights at {first['read_gb_s']:.1f} GB/s (read bandwidth of this run)")
    batches = " | ".join(f"batch {p['batch']}" for p in profiles)
    lines = [head, f"| part | {batches} |", "| :--- |" + " ---: |" * len(profiles)]
    for part in first["parts"]:
        cells = " | ".join(f"{p['parts'][part]:.2f}" for p in profiles)
        lines.append(f"| {part} | {cells} |")
    lines.append("| **step** | " + " | ".join(f"**{p['step_ms']:.2f}**" for p in profiles)
                 + " |")
    for p in profiles:
        if p.get("top_other_ops"):
            lines.append(f"other ops, batch {p['batch']}: " + ", ".join(
                f"{k} {v:.2f}" for k, v in p["top_other_ops"].items()))
    return "\n".join(lines)
