"""What `minisgl bench compare` measures of each service it starts, a minisgl service per
transport and mode or a peer: its start, idle CPU before and after the load, the CPU each process
spends per output token, its resident memory, and each concurrency level's runs."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minisgl_core.bench.peer_process import PeerProcess
from minisgl_core.bench.peers import KV_CACHE_GIB, MAX_MODEL_LEN, PeerSpec
from minisgl_core.bench.serve import run_serve

IDLE_SETTLE_S = 1.0  # let the last request's bookkeeping finish before idle CPU is sampled
IDLE_SAMPLE_S = 3.0  # how long idle CPU is sampled
COMPILE_WAIT_S = 1200.0  # a first start's graphs: ~1.5 min at 135M on 2 cores
# `--mode NAME`: the settings of one minisgl service per mode, measured side by side. fp32 and
# bf16 name the weights too: a GGUF is otherwise served in its own format (--quantization auto)
NONE = "quantization=none"
MODES = {"default": (),  # `minisgl launch` with no flags: what users get
         "fp32": ("dtype=float32", NONE), "bf16": ("dtype=bfloat16", NONE),
         "int8": ("quantization=int8",), "int8-wo": ("quantization=int8-wo",),
         "int4": ("quantization=int4",), "bf16-int4": ("dtype=bfloat16", "quantization=int4"),
         "fp32-int4": ("dtype=float32", "quantization=int4"),
         # the same weights with int8 KV pages (--kv-cache-dtype int8)
         "fp32-kv-int8": ("dtype=float32", NONE, "kv_cache_dtype=int8"),
         "bf16-kv-int8": ("dtype=bfloat16", NONE, "kv_cache_dtype=int8"),
         # the batch-invariant kernels (--deterministic)
         "fp32-deterministic": ("dtype=float32", NONE, "deterministic=true"),
         "bf16-deterministic": ("dtype=bfloat16", NONE, "deterministic=true"),
         "eager": ("compile=false",)}  # no flags but the decode step left eager


def peer_limits(model_dir: str, launch_args: Sequence[str] = ()) -> dict[str, int]:
    """The peers' context (MAX_MODEL_LEN tokens) and KV cache (KV_CACHE_GIB of fp32 pages) as
    minisgl settings, each but where ``launch_args`` set it (``-s num_pages=N``): by default
    the engine keeps room for one request at the config's full context, 40,960 tokens at
    Qwen3's shapes (8.8 GiB of fp32 KV at Qwen3-0.6B's)."""
    from minisgl_core.engine.config import ModelConfig

    c = ModelConfig.from_dir(Path(model_dir))
    page_bytes = 16 * c.num_layers * 2 * c.num_kv_heads * c.head_dim * 4  # 16-token pages
    limits = {"max_seq_len_override": MAX_MODEL_LEN,
              "num_pages": (KV_CACHE_GIB << 30) // page_bytes}
    for arg in launch_args:
        key, sep, value = arg.partition("=")
        if sep and key.strip() in limits:
            limits[key.strip()] = int(value)
    return limits


def sized_like_peers(model_dir: str, launch_args: Sequence[str]) -> list[str]:
    """``-s`` settings of ``peer_limits`` for every service, each unless ``launch_args`` set
    it."""
    given = {arg.partition("=")[0].strip() for arg in launch_args}
    return [a for key, value in peer_limits(model_dir).items() if key not in given
            for a in ("-s", f"{key}={value}")]


def say(message: str) -> None:
    print(f"bench compare: {message}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU seconds so far of ``pid`` (as "launcher") and each of its descendants
    (by process title, e.g. "minisgl::scheduler"; pid-suffixed when a title repeats)."""
    import psutil

    root = psutil.Process(pid)
    out: dict[str, float] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            title = "launcher" if proc.pid == pid else " ".join(proc.cmdline()[:1])
        except psutil.Error:
            continue
        key = title if title not in out else f"{title}:{proc.pid}"
        out[key] = times.user + times.system
    return out


def idle_cpu_percent(pid: int, seconds: float | None = None) -> float:
    """CPU used by ``pid`` and its descendants over ``seconds`` (IDLE_SAMPLE_S), in % of one
    core."""
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(IDLE_SAMPLE_S if seconds is None else seconds)
    after, wall = cpu_seconds(pid), time.monotonic() - t0
    return 100 * sum(after[k] - before[k] for k in after.keys() & before.keys()) / wall


@dataclass
class ServiceUnderTest:
    """One launched service and what was measured of it so far."""

    transport: str
    service: Any  # testing.service.RunningService
    startup_s: float
    load_avg: float
    idle_cpu_pct_before: float
    scheme: str | None = None  # the weights' format, for the host's roofline
    meta: dict[str, Any] = field(default_factory=dict)  # what /v1/models says it runs
    runs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # concurrency -> runs
    cpu_s: dict[str, float] = field(default_factory=dict)  # by process, summed over all runs
    client_s: float = 0.0

    @classmethod
    def start(cls, model_dir: str, transport: str, log_dir: Path,
              launch_args: Sequence[str], mode: str | None = None,
              label: str | None = None) -> ServiceUnderTest:
        """Launch the service of ``model_dir`` (or a GGUF file) on ``transport`` (in ``mode``,
        one of MODES) and sample its idle CPU; it is labelled ``label``, else "TRANSPORT
        MODE"."""
        import httpx

        from minisgl_core.testing.service import launch_service

        label = label or (f"{transport} {mode}" if mode else transport)
        args = [*launch_args, *(a for kv in MODES[mode] for a in ("-s", kv))] if mode \
            else list(launch_args)
        say(f"{label}: starting the service")
        load = os.getloadavg()[0]  # others' load on the machine: how noisy this run was
        t0 = time.monotonic()
        service = launch_service(model_dir, transport=transport, args=args,
                                 log_dir=log_dir, timeout=600.0)
        startup = time.monotonic() - t0
        (model,) = httpx.get(f"{service.url}/v1/models", timeout=10).json()["data"]
        meta = model.get("meta", {})
        if meta.get("compile") == "on":  # measured as it serves once its graphs are in
            waited = wait_compiled(service.url)
            say(f"{label}: the compiled decode step serves {waited:.1f} s after ready")
        time.sleep(IDLE_SETTLE_S)
        idle = idle_cpu_percent(service.proc.pid)
        say(f"{label}: ready in {startup:.1f} s, idle CPU {idle:.1f}% of a core; {meta}")
        return cls(label, service, startup, load, idle, scheme_of(meta), meta)

    def run_level(self, concurrency: int, requests: int | None, max_tokens: int,
                  prompt_len: int | None, duration_limit_s: float, progress: bool,
                  extra_body: dict[str, Any] | None = None,
                  request_rate: float | None = None) -> None:
        """One concurrency level of load, adding up the CPU each process spent on it;
        ``extra_body`` merged into every request (sampling parameters: greedy without);
        ``request_rate``: requests at Poisson arrival times, ``concurrency`` the most at once."""
        pid = self.service.proc.pid
        before, client = cpu_seconds(pid), time.process_time()
        (level,) = asyncio.run(run_serve(self.service.url, [concurrency], requests, max_tokens,
                                         prompt_len=prompt_len,
                                         duration_limit_s=duration_limit_s, progress=progress,
                                         extra_body=extra_body, request_rate=request_rate))
        after = cpu_seconds(pid)
        for k in after.keys() & before.keys():
            self.cpu_s[k] = self.cpu_s.get(k, 0.0) + after[k] - before[k]
        self.client_s += time.process_time() - client
        self.runs.setdefault(concurrency, []).append(level.as_dict())

    def finish(self) -> dict[str, Any]:
        """Sample the idle CPU after the load, stop the service, return its results."""
        try:
            time.sleep(IDLE_SETTLE_S)
            idle_after = idle_cpu_percent(self.service.proc.pid)
            say(f"{self.transport}: idle CPU after the load {idle_after:.1f}% of a core")
            rss = tree_rss_mb(self.service.proc.pid)
        finally:
            code = self.service.stop()
        tokens = sum(run["output_tokens"] for runs in self.runs.values() for run in runs)
        used = {**self.cpu_s, "client": self.client_s}
        cpu_us = {k: round(1e6 * v / max(tokens, 1), 1) for k, v in sorted(used.items())
                  if v > 0}
        return {"transport": self.transport, "scheme": self.scheme, "meta": self.meta,
                "startup_s": self.startup_s, "rss_mb": rss,
                "idle_cpu_pct_before": self.idle_cpu_pct_before,
                "idle_cpu_pct_after": idle_after, "exit_code": code, "load_avg": self.load_avg,
                "cpu_us_per_token": cpu_us, "levels": [median_run(r) for r in self.runs.values()],
                "runs": list(self.runs.values())}


def wait_compiled(url: str, timeout_s: float = COMPILE_WAIT_S) -> float:
    """Seconds until ``url``'s /metrics says its decode step runs compiled (a first start
    compiles in the background); RuntimeError past ``timeout_s``."""
    import httpx

    from minisgl_core.testing.service import parse_metrics

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        metrics = parse_metrics(httpx.get(f"{url}/metrics", timeout=10).text)
        if metrics.get("minisgl_decode_step_compiled") == 1:
            return time.monotonic() - t0
        time.sleep(1.0)
    raise RuntimeError(f"the decode step of {url} did not compile in {timeout_s:.0f} s")


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of a level's repeated runs, the one with the median output tokens/s (the lower middle
    one for an even count)."""
    ranked = sorted(runs, key=lambda r: r["output_tok_s"])
    return ranked[(len(ranked) - 1) // 2]


def scheme_of(meta: dict[str, Any]) -> str:
    """The weights' format a service runs, from its /v1/models ``meta``: its quantization,
    else its dtype (``--dtype auto`` decides at start) as bf16 or fp32."""
    quantization = meta.get("quantization")
    if quantization and quantization != "none":
        return str(quantization)
    return "bf16" if meta.get("dtype") == "bfloat16" else "fp32"


def service_bytes(services: Sequence[ServiceUnderTest]) -> dict[str, tuple[str, int]]:
    """Each service's label -> (its scheme, the bytes its matmul weights hold, from its
    /v1/models ``meta``), for its own roofline; bf16 ones left out, as their scheme's is."""
    return {s.transport: (s.scheme, int(s.meta["weight_bytes"])) for s in services
            if s.scheme and s.scheme != "bf16" and int(s.meta.get("weight_bytes") or 0) > 0}


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, summed (shared pages count once per
    process, as `ps` shows them), in MB."""
    import psutil

    total = 0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / 1e6


def start_peer(spec: PeerSpec, log_dir: Path) -> ServiceUnderTest:
    """Start a peer and sample its idle CPU, as `ServiceUnderTest.start` does for minisgl."""
    say(f"{spec.name}: starting the peer")
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    peer = PeerProcess.start(spec, log_dir)
    startup = time.monotonic() - t0
    time.sleep(IDLE_SETTLE_S)
    idle = idle_cpu_percent(peer.proc.pid)
    say(f"{spec.name}: ready in {startup:.1f} s, idle CPU {idle:.1f}% of a core")
    return ServiceUnderTest(spec.name, peer, startup, load, idle, spec.scheme)
