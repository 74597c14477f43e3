"""/metrics in the Prometheus text format: worker gauges plus counters and latency histograms
measured by this frontend for every request it served. Under ``--dp N`` each engine series also
has one sample per scheduler replica, labelled ``dp_rank``, beside the unlabelled total."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISH_REASONS = ("stop", "length", "abort", "error")
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

# always exported (NaN until the workers report them), with their help text
ENGINE_GAUGES = {
    "requests_running": "Requests in the scheduler's running batch.",
    "requests_waiting": "Requests queued in the scheduler, not yet admitted.",
    "kv_pages_total": "KV cache pages in the pool.",
    "kv_pages_free": "KV cache pages that can be allocated now (free, or held only by the "
                     "prefix cache).",
    "kv_pages_cached": "KV cache pages held by the prefix cache.",
    "decode_step_compiled": "1 once decode steps run as compiled graphs, else 0 (eager).",
}
_OWNED = {"minisgl_prompt_tokens_total", "minisgl_generation_tokens_total",
          "minisgl_requests_finished_total", "minisgl_time_to_first_token_seconds",
          "minisgl_time_per_output_token_seconds", "minisgl_frontend_requests_inflight",
          "minisgl_get_load_requests_total"}


class Histogram:
    """A fixed-bucket histogram (cumulated at render time, as Prometheus wants)."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last slot is (largest bucket, +Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Add one observation."""
        slot = next((i for i, b in enumerate(self.buckets) if value <= b), len(self.buckets))
        self.counts[slot] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        """The ``_bucket``/``_sum``/``_count`` sample lines."""
        out, running = [], 0
        for bound, n in zip((*self.buckets, math.inf), self.counts, strict=True):
            running += n
            out.append(f'{name}_bucket{{le="{_fmt(bound)}"}} {running}')
        out += [f"{name}_sum {_fmt(self.sum)}", f"{name}_count {self.count}"]
        return out


class FrontendMetrics:
    """Counters and histograms the frontend keeps per engine request (one per choice)."""

    def __init__(self, *, sglang_names: bool = False) -> None:
        self.sglang_names = sglang_names  # also export SGLang's gauge names (fleet_gauges)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.tpot = Histogram(TPOT_BUCKETS)
        self.inflight = 0  # engine requests this frontend is streaming right now
        self.load_polls = 0  # GETs of /get_load (a router's power_of_two policy polls it)

    def record_finish(self, reason: str, *, prompt_tokens: int, completion_tokens: int,
                      ttft: float | None, tpot: float | None) -> None:
        """Account one finished engine request."""
        self.finished[reason] = self.finished.get(reason, 0) + 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += completion_tokens
        if ttft is not None:
            self.ttft.observe(ttft)
        if tpot is not None:
            self.tpot.observe(tpot)

    def render(self, engine: Mapping[str, float]) -> str:
        """The whole exposition: engine gauges first, then this frontend's own series."""
        out: list[str] = []
        labelled = _by_base(engine)
        for key, help_text in ENGINE_GAUGES.items():
            _family(out, f"minisgl_{key}", "gauge", help_text,
                    [f"minisgl_{key} {_fmt(engine.get(key, math.nan))}",
                     *(f"minisgl_{key}{labels} {_fmt(v)}" for labels, v in labelled.get(key, ()))])
        fleet_gauges(out, engine, sglang_names=self.sglang_names)
        for key in sorted(engine):
            name = "minisgl_" + re.sub(r"[^a-zA-Z0-9_]", "_", key.removeprefix("minisgl_"))
            if key in ENGINE_GAUGES or name in _OWNED or "{" in key:
                continue
            kind = "counter" if name.endswith("_total") else "gauge"
            _family(out, name, kind, f"Reported by the engine workers ({key}).",
                    [f"{name} {_fmt(engine[key])}",
                     *(f"{name}{labels} {_fmt(v)}" for labels, v in labelled.get(key, ()))])
        _family(out, "minisgl_prompt_tokens_total", "counter", "Prompt tokens of served requests.",
                [f"minisgl_prompt_tokens_total {self.prompt_tokens}"])
        _family(out, "minisgl_generation_tokens_total", "counter",
                "Generated tokens of served requests.",
                [f"minisgl_generation_tokens_total {self.generation_tokens}"])
        _family(out, "minisgl_requests_finished_total", "counter",
                "Finished engine requests by finish reason.",
                [f'minisgl_requests_finished_total{{reason="{r}"}} {n}'
                 for r, n in self.finished.items()])
        _family(out, "minisgl_frontend_requests_inflight", "gauge",
                "Engine requests this frontend is waiting on.",
                [f"minisgl_frontend_requests_inflight {self.inflight}"])
        _family(out, "minisgl_get_load_requests_total", "counter",
                "GET /get_load requests served (a router polling the load).",
                [f"minisgl_get_load_requests_total {self.load_polls}"])
        _family(out, "minisgl_time_to_first_token_seconds", "histogram",
                "Time from arrival at the frontend to the first generated token.",
                self.ttft.lines("minisgl_time_to_first_token_seconds"))
        _family(out, "minisgl_time_per_output_token_seconds", "histogram",
                "Mean time between generated tokens after the first, per request.",
                self.tpot.lines("minisgl_time_per_output_token_seconds"))
        return "\n".join(out) + "\n"


def fleet_gauges(out: list[str], engine: Mapping[str, float], *, sglang_names: bool) -> None:
    """The gauges routers read under vLLM's names (and SGLang's with ``sglang_names``): the
    Gateway API Inference Extension's model-server protocol (docs/scale-out.md)."""
    total, free = engine.get("kv_pages_total", math.nan), engine.get("kv_pages_free", math.nan)
    # the share of KV pages held by requests (cached-only pages are allocatable, so not used)
    usage = (total - free) / total if total > 0 else math.nan
    waiting, running = (engine.get(k, math.nan) for k in ("requests_waiting", "requests_running"))
    gauges = [
        ("vllm:num_requests_waiting", "Requests queued in the schedulers, not yet admitted.",
         waiting),
        ("vllm:num_requests_running", "Requests in the schedulers' running batches.", running),
        ("vllm:kv_cache_usage_perc",
         "KV cache usage, 0-1: pages held by requests / pages in the pool.", usage),
    ]
    if sglang_names:
        gauges += [
            ("sglang:num_queue_reqs", "Requests waiting (SGLang's name).", waiting),
            ("sglang:num_running_reqs", "Requests running (SGLang's name).", running),
            ("sglang:token_usage",
             "KV cache usage, 0-1 (SGLang's name; equals vllm:kv_cache_usage_perc).", usage),
        ]
    for name, help_text, value in gauges:
        _family(out, name, "gauge", help_text, [f"{name} {_fmt(value)}"])
    page_size = engine.get("kv_page_size", math.nan)
    if not math.isnan(page_size) and not math.isnan(total):
        _family(out, "vllm:cache_config_info", "gauge", "KV cache configuration (value 1).",
                [f'vllm:cache_config_info{{block_size="{int(page_size)}",'
                 f'num_gpu_blocks="{int(total)}"}} 1'])


def _by_base(engine: Mapping[str, float]) -> dict[str, list[tuple[str, float]]]:
    """The labelled values (``name{dp_rank="1"}``: one scheduler replica's) by their name."""
    out: dict[str, list[tuple[str, float]]] = {}
    for key, value in engine.items():
        base, brace, labels = key.partition("{")
        if brace:
            out.setdefault(base, []).append(("{" + labels, value))
    return out


def _family(out: list[str], name: str, kind: str, help_text: str, samples: list[str]) -> None:
    out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def _fmt(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)
