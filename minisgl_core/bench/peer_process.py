"""A peer of `minisgl bench compare` while it runs: its server started on a free port, waited
for, and stopped with its whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from minisgl_core.bench.peers import PeerSpec

STOP_TIMEOUT_S = 30.0


class PeerProcess:
    """A running peer server, in its own session; the handle `ServiceUnderTest` drives."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.proc, self.port, self.log_path = proc, port, log_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, spec: PeerSpec, log_dir: Path) -> PeerProcess:
        """Start ``spec`` on a free port and wait (bounded) until /v1/models answers 200."""
        import httpx

        from minisgl_core.service.ports import free_port

        port = free_port()
        slug = "".join(ch if ch.isalnum() else "-" for ch in spec.name)
        log_path = log_dir / f"peer-{slug}-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(spec.command(port), stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **spec.env}, start_new_session=True)
        peer = cls(proc, port, log_path)
        deadline = time.monotonic() + spec.ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"peer {spec.name} exited with {proc.returncode} before it "
                                   f"was ready; log {log_path}:\n{peer.log_tail()}")
            try:
                if httpx.get(f"{peer.url}/v1/models", timeout=2).status_code == 200:
                    return peer
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                peer.stop()
                raise RuntimeError(f"peer {spec.name} not ready after "
                                   f"{spec.ready_timeout_s:.0f} s; log {log_path}:\n"
                                   f"{peer.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> int:
        """SIGTERM the peer's server, as a user stops one (it stops its own workers in order),
        then SIGKILL whatever of its process group is left; the server's exit code."""
        code = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        try:  # workers that outlive the server (or a server that did not stop)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.wait(STOP_TIMEOUT_S) if code is None else code
