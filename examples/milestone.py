"""The service milestone: one command starts minisgl; the official OpenAI client talks to it.

Starts `minisgl launch --transport zmq --frontend openai` on a free port with the default model,
counts its processes, makes one non-streaming call, one streaming call (time to first chunk), 8
concurrent requests, and prints a curl line to try. `--transport nng` works the same.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
from openai import OpenAI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(proc: subprocess.Popen[bytes], port: int, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"minisgl launch exited with code {proc.returncode} before it was ready")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    sys.exit(f"the service was not ready after {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transport", default="zmq")
    parser.add_argument("--model", default=None, help="default: SmolLM2-135M-Instruct")
    args = parser.parse_args()
    port = free_port()
    cmd = [sys.executable, "-m", "minisgl_core", "launch", "--transport", args.transport,
           "--frontend", "openai", "--port", str(port)]
    if args.model:
        cmd += ["--model", args.model]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        t = time.time()
        wait_ready(proc, port)
        workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
                   if c.name().startswith("minisgl::") or "minisgl::" in " ".join(c.cmdline())]
        titles = ", ".join(sorted(" ".join(w.cmdline()).strip() for w in workers))
        print(f"service ready ({time.time() - t:.0f} s): 1 API server process + {len(workers)} "
              f"worker processes ({titles}), passing messages over {args.transport}")
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        model = client.models.list().data[0].id

        r = client.chat.completions.create(
            model=model, max_tokens=16, temperature=0,
            messages=[{"role": "user", "content": "The capital of France is? Answer in one word."}])
        print(f"non-streaming: {r.choices[0].message.content!r}")

        t0 = time.perf_counter()
        first: float | None = None
        chunks = []
        for c in client.chat.completions.create(
                model=model, max_tokens=32, temperature=0, stream=True,
                messages=[{"role": "user", "content": "Count from 1 to 10."}]):
            if c.choices and c.choices[0].delta.content:
                first = first or time.perf_counter() - t0
                chunks.append(c.choices[0].delta.content)
        total_ms = (time.perf_counter() - t0) * 1000
        print(f"streaming: {len(chunks)} chunks, the first after {(first or 0) * 1000:.0f} ms, "
              f"all of them after {total_ms:.0f} ms: {''.join(chunks)!r}")

        def ask(i: int) -> float:
            t0 = time.perf_counter()
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"{i}+{i}=?"}],
                max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
            return time.perf_counter() - t0

        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            lat = list(ex.map(ask, range(8)))
        total = time.perf_counter() - t0
        print(f"8 concurrent requests x 16 tokens: {total:.2f} s in total "
              f"({8 * 16 / total:.1f} tokens/s), each request {min(lat):.2f}-{max(lat):.2f} s; "
              "they share one batch, nobody queues")
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]},
                          separators=(",", ":"))
        print(f"Try it yourself: curl http://127.0.0.1:{port}/v1/chat/completions "
              f"-H 'Content-Type: application/json' -d '{body}'")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
