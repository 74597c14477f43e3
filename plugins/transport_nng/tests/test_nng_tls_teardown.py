"""Stopping over nng with TLS exits 0, every time: 50 processes that stop while peers with other
keys are in the middle of TLS handshakes with them, and a whole service stopped the same way."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from minisgl_core.interfaces import ChannelClosed, Sender
from minisgl_core.testing.service import launch_service
from minisgl_core.testing.transports import make_transport, write_transport_keys

PLUGINS = ("minisgl_transport_nng",)
STOPS = 50

# One stop: a member round trip on three TLS listeners, then four dialers with other keys on
# each, redialing every 20 ms and failing their handshakes, until the process stops (its
# transports closed first, or left to the exit) at a moment that varies with the round.
_STOPPING_PROCESS = """
import sys, time
from minisgl_core.interfaces import AddressInUse
from minisgl_core.service.ports import free_port
from minisgl_transport_nng.transport import NngTransport

keys, other_keys, how, wait_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
member = NngTransport({"endpoints": "tcp", "keys": keys})
intruders = NngTransport({"endpoints": "tcp", "keys": other_keys})


def bound_pull():
    # a free port can be taken before it is bound (the other round runs beside this one)
    for _ in range(20):
        ep = f"tls+tcp://127.0.0.1:{free_port()}"
        try:
            return ep, member.pull(ep, bind=True)
        except AddressInUse:
            continue
    raise RuntimeError("no free port in 20 tries")


for _ in range(3):
    ep, inbox = bound_pull()
    member.push(ep).send(b"member")
    assert inbox.recv(timeout=30) == b"member"
    for _ in range(4):
        intruders.push(ep)
time.sleep(wait_s)
if how == "close":
    intruders.close()
    member.close()
print("stopped", flush=True)
"""


@pytest.fixture(scope="module")
def key_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(this side's keys, another service's keys)."""
    root = tmp_path_factory.mktemp("keys")
    return (write_transport_keys("nng", PLUGINS, root / "ours"),
            write_transport_keys("nng", PLUGINS, root / "other"))


def _stop_once(round_no: int, keys: Path, other_keys: Path) -> tuple[int, str]:
    how = "close" if round_no % 2 else "exit"
    wait_s = (round_no % 7) * 0.04
    done = subprocess.run([sys.executable, "-c", _STOPPING_PROCESS, str(keys), str(other_keys),
                           how, str(wait_s)], capture_output=True, text=True, timeout=60)
    return done.returncode, f"round {round_no} ({how} after {wait_s:.2f} s): exit code " \
        f"{done.returncode}, stdout {done.stdout!r}, stderr tail:\n{done.stderr[-1500:]}"


def test_tls_processes_stop_cleanly_fifty_times_in_a_row(key_dirs: tuple[Path, Path]) -> None:
    keys, other_keys = key_dirs
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda i: _stop_once(i, keys, other_keys), range(STOPS)))
    failed = [report for code, report in results if code != 0]
    assert not failed, f"{len(failed)} of {STOPS} stops failed; first:\n{failed[0]}"


def _send_until_closed(tx: Sender) -> None:
    try:
        tx.send(b"intruder")
    except ChannelClosed:
        pass


def test_a_tls_service_stops_cleanly_while_intruders_redial(key_dirs: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    from minisgl_core.testing.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny-llama", "llama")
    service_keys = tmp_path / "service-keys"
    subprocess.run([sys.executable, "-m", "minisgl_core", "keys", "new", str(service_keys)],
                   check=True, capture_output=True, timeout=300)
    svc = launch_service(str(model), transport="nng", log_dir=tmp_path, args=[
        "--dtype", "float32", "--max-seq-len-override", "512", "--num-pages", "256",
        "--page-size", "16", "-s", "num_threads=1", "-s", "transports.nng.endpoints=tcp",
        "-s", f"transports.nng.keys={service_keys}"])
    intruders = make_transport("nng", PLUGINS, {"endpoints": "tcp", "keys": str(key_dirs[1])})
    threads = []
    try:
        reply = httpx.post(f"{svc.url}/v1/completions", timeout=60, json={
            "model": svc.model_name(), "prompt": "hello", "max_tokens": 4, "ignore_eos": True})
        assert reply.status_code == 200
        for port in _listening_ports(svc.proc.pid, svc.port):  # the launcher's own listeners
            tx = intruders.push(f"tls+tcp://127.0.0.1:{port}")
            threads.append(threading.Thread(target=_send_until_closed, args=(tx,), daemon=True))
            threads[-1].start()
        code = svc.stop()
    finally:
        svc.stop()
        intruders.close()
        for thread in threads:
            thread.join(10)
    assert code == 0, f"the launcher exited with {code}:\n{svc.log()[-3000:]}"
    assert "panic" not in svc.log()
    assert not svc.leftover_workers()


def _listening_ports(pid: int, http_port: int) -> list[int]:
    import psutil

    return sorted({c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
                   if c.status == psutil.CONN_LISTEN and c.laddr.port != http_port})
