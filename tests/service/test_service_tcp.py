"""The service over tcp endpoints with keys: peers that are refused (other keys, garbage, a
silent connection) on every port leave a stream in flight unharmed; bad settings are one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from minisgl_core.interfaces import ChannelClosed, Sender
from minisgl_core.testing.service import RunningService
from minisgl_core.testing.transports import make_transport, write_transport_keys

REFUSAL_WAIT_S = 120.0


@pytest.fixture(scope="module", params=["zmq+tcp", "nng+tcp"])
def guarded(request: pytest.FixtureRequest,
            launch_variant: Any) -> Iterator[tuple[str, RunningService]]:
    """(transport, service) on tcp + keys, whose stalled handshakes are closed after 1 s."""
    with launch_variant(request.param, handshake_ms=1000) as svc:
        yield request.param.partition("+")[0], svc


def transport_ports(svc: RunningService) -> list[int]:
    """The tcp ports the launcher and its workers listen on, the HTTP port aside."""
    import psutil

    ports = set()
    for pid in [svc.proc.pid, *svc.worker_pids]:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port != svc.port:
                ports.add(conn.laddr.port)
    return sorted(ports)


def _send_until_closed(tx: Sender) -> None:
    try:
        tx.send(b"intruder")
    except ChannelClosed:
        pass


def _wait_for_refusals(svc: RunningService, ports: list[int]) -> None:
    """Until the log has, for every port, three refusals, one of them the silent connection's."""
    deadline = time.monotonic() + REFUSAL_WAIT_S
    while True:
        lines = [line for line in svc.log().splitlines() if "refused a peer" in line]
        missing = [p for p in ports
                   if len([line for line in lines if f"127.0.0.1:{p}:" in line]) < 3
                   or not any(f"127.0.0.1:{p}:" in line and "no handshake within" in line
                              for line in lines)]
        if not missing:
            return
        assert time.monotonic() < deadline, (
            f"waited {REFUSAL_WAIT_S:.0f} s for refusals on ports {missing}; log:\n"
            + "\n".join(lines[-30:]))
        time.sleep(0.1)


def test_refused_peers_leave_a_stream_in_flight_unharmed(guarded: tuple[str, RunningService],
                                                         tmp_path: Path) -> None:
    name, svc = guarded
    ports = transport_ports(svc)
    # control, the frontend's inbox, and the inboxes of the tokenizer, scheduler, detokenizer
    assert len(ports) == 5, ports
    scheme = "tls+tcp" if name == "nng" else "tcp"
    other_keys = write_transport_keys(name, None, tmp_path / "other")
    intruders = make_transport(name, None, {"endpoints": "tcp", "keys": str(other_keys)})
    body = {"model": svc.model_name(), "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "hello"}], "ignore_eos": True}
    threads: list[threading.Thread] = []
    held: list[socket.socket] = []
    try:
        with httpx.stream("POST", f"{svc.url}/v1/chat/completions", json=body,
                          timeout=REFUSAL_WAIT_S) as resp:
            chunks = (json.loads(line[6:]) for line in resp.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]")
            first = next(chunks)
            # the detokenizer stops: the rest of the answer waits in the transport meanwhile
            with svc.paused("detokenizer"):
                # the raw connections first: the intruders reconnect every few ms, and while
                # the detokenizer is frozen they fill its listen backlog, where a later silent
                # connection would be dropped by the kernel and never reach the transport
                for port in ports:
                    garbage = socket.create_connection(("127.0.0.1", port))
                    garbage.sendall(os.urandom(512))
                    silent = socket.create_connection(("127.0.0.1", port))
                    held += [garbage, silent]
                for port in ports:
                    tx = intruders.push(f"{scheme}://127.0.0.1:{port}")
                    threads.append(threading.Thread(target=_send_until_closed, args=(tx,),
                                                    daemon=True))
                    threads[-1].start()
            _wait_for_refusals(svc, ports)
            rest = list(chunks)
        finish = [c["choices"][0]["finish_reason"] for c in [first, *rest] if c["choices"]]
        assert finish[-1] == "length" and "error" not in json.dumps(rest)
        text = "".join(c["choices"][0]["delta"].get("content") or ""
                       for c in [first, *rest] if c["choices"])
    finally:
        for conn in held:
            conn.close()
        intruders.close()
        for th in threads:
            th.join(10)
    assert text, "the stream carried no text"
    assert sorted(svc.workers()) == ["detokenizer", "scheduler", "tokenizer"]  # all alive
    assert httpx.get(f"{svc.url}/health", timeout=10).status_code == 200
    again = httpx.post(f"{svc.url}/v1/completions", timeout=60, json={
        "model": svc.model_name(), "prompt": "hello", "max_tokens": 4, "ignore_eos": True})
    assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(("settings", "message"), [
    (["-s", "transports.zmq.host=0.0.0.0"],
     "minisgl: transport 'zmq': tcp endpoints on 0.0.0.0 are reachable from other hosts and "
     "need keys; make them with `minisgl keys new DIR` and set transports.zmq.keys=DIR"),
    (["-s", "transports.zmq.ports=5700-5600"],
     "minisgl: option 'ports' of transport 'zmq': port range '5700-5600' ends before it starts"),
    (["-s", "transports.zmq.keys=/nonexistent/keys"],
     "minisgl: transport 'zmq': /nonexistent/keys/zmq does not exist; make them with "
     "`minisgl keys new DIR` and set transports.zmq.keys=DIR"),
])
def test_bad_tcp_settings_stop_the_launch_with_one_line(tiny_model: str, settings: list[str],
                                                        message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "minisgl_core", "launch", "--transport", "zmq", "--model",
         tiny_model, "-s", "transports.zmq.endpoints=tcp", *settings],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [message]
