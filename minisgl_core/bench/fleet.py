"""``minisgl bench fleet``: one synthetic-scheduler service vs two behind sglang-router
(round_robin), same run.

Usage: minisgl bench fleet [--tokens-per-s 50] [--max-running 8]
Each service answers at ``tokens_per_s`` per request with at most ``max_running`` requests in
its batch, so a service has a fixed capacity and a second one behind the router adds its own;
``--tokens-per-s 0`` runs the synthetic scheduler at full speed (then the host's cores, shared
by every process, are the limit). Needs the router extra (docs/scale-out.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from minisgl_core.bench.options import extra_needed


def bench(url: str, model: str, concurrency: list[int], requests: int,
          max_tokens: int) -> list[dict[str, Any]]:
    """`minisgl bench serve --json` against ``url``: one dict per concurrency level."""
    # --model: the router's /v1/models answers as text/plain, which bench serve refuses
    cmd = [sys.executable, "-m", "minisgl_core", "bench", "serve", "--url", url, "--json",
           "--model", model,
           "--requests", str(requests), "--max-tokens", str(max_tokens)]
    for c in concurrency:
        cmd += ["--concurrency", str(c)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"bench serve against {url} failed:\n{done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def fleet_command(
    tokens_per_s: Annotated[float, typer.Option(
        help="Tokens a second per request of each service (0: full speed).")] = 50.0,
    max_running: Annotated[int, typer.Option(
        min=1, help="Requests at most in each service's batch.")] = 8,
    requests: Annotated[int, typer.Option(min=1, help="Requests per level.")] = 64,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request.")] = 32,
    concurrency: Annotated[list[int] | None, typer.Option(
        help="Requests in flight at once (repeat; default 8 and 32).")] = None,
) -> None:
    """One synthetic-scheduler service against two behind sglang-router (round_robin), same
    run: output tok/s, TTFT and req/s per concurrency level (needs the router extra)."""
    extra_needed("sglang_router", "router")
    import httpx

    from minisgl_core.testing.service import free_port, launch_service
    from minisgl_core.testing.tiny import make_tiny_model

    levels = concurrency or [8, 32]
    tmp = Path(tempfile.mkdtemp(prefix="minisgl-fleet-"))
    model = str(make_tiny_model(tmp / "tiny", "llama"))
    extra = ["--scheduler", "synthetic", "-s", f"max_running_requests={max_running}",
             "--max-seq-len-override", "1024"]
    if tokens_per_s > 0:
        extra += ["-s", f"roles.scheduler.synthetic.tokens_per_s={tokens_per_s}"]
    services = [launch_service(model, log_dir=tmp, args=extra) for _ in range(2)]
    port = free_port()
    router_log = tmp / "router.log"
    with open(router_log, "wb") as log:  # its metrics on a free port too: 29000 may be taken
        router = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls",
             *[s.url for s in services], "--policy", "round_robin", "--host", "127.0.0.1",
             "--port", str(port), "--prometheus-port", str(free_port()),
             "--health-check-interval-secs", "1"],
            stdout=log, stderr=subprocess.STDOUT)
    router_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(router_url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if router.poll() is not None:
                tail = router_log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the router exited ({router.returncode}):\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError("the router did not come up in 120 s")
            time.sleep(0.2)
        name = services[0].model_name()
        print("router /v1/models:", httpx.get(router_url + "/v1/models", timeout=10).text)
        rows = {"one service": bench(services[0].url, name, levels, requests,
                                     max_tokens),
                "two behind the router": bench(router_url, name, levels, requests,
                                               max_tokens)}
        print("| setup | concurrency | output tok/s | TTFT p50 ms | req/s |")
        print("|---|---|---|---|---|")
        for name, levels_out in rows.items():
            for r in levels_out:
                print(f"| {name} | {r['concurrency']} | {r['output_tok_s']:.0f}"
                      f" | {r['ttft_p50_ms']:.0f} | {r['req_s']:.1f} |")
        print(json.dumps(rows))
    finally:
        router.terminate()
        router.wait(30)
        for s in services:
            s.stop()

