"""A worker that joins from another host: the launcher's side of ``--remote ROLE``.

One address and the keys are all the remote worker needs. The launcher binds, on its own host:

- ``hello`` (PUB, the address the worker connects to): the assignment, republished every
  ``HELLO_INTERVAL_S`` (endpoints, the launch config, the run id); the worker also takes its
  silence as the launcher's death;
- ``<role>.remote`` (PUSH): a relay thread forwards the role's usual inbox (which the launcher
  binds in the worker's place, so the other workers and Shutdown reach it unchanged) to here,
  and the remote worker connects its inbox to it;
- ``heartbeat`` (PULL): the worker's beats; silence for ``HEARTBEAT_TIMEOUT_S`` is its death.

Every socket is a transport channel, so CURVE / TLS keys guard them all.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from minisgl_core.interfaces import ChannelClosed
from minisgl_core.service.running import Worker
from minisgl_core.service.spec import Endpoints

if TYPE_CHECKING:
    from collections.abc import Callable

    from minisgl_core.config.launch import LaunchConfig
    from minisgl_core.interfaces import Transport

log = logging.getLogger("minisgl")

REMOTE_ROLES = ("tokenizer", "scheduler", "detokenizer")
HELLO_INTERVAL_S = 0.5
HEARTBEAT_S = 0.5
HEARTBEAT_TIMEOUT_S = 5.0  # ten beats missed: the worker or the network is gone
RECV_WAIT_S = 0.2  # the relay's and heartbeat reader's longest wait, so that they see a stop


class Assignment(msgspec.Struct, frozen=True):
    """What the launcher publishes on ``hello``: everything a remote worker needs."""

    run_id: str
    role: str
    config: dict[str, Any]  # LaunchConfig.to_dict()
    inbox: str  # the relay's PUSH: the worker connects its inbox here
    heartbeat: str
    tokenizer: str
    scheduler: str
    detokenizer: str
    control: str
    frontends: dict[str, str]
    max_context: int


class Beat(msgspec.Struct, frozen=True):
    """One heartbeat of a remote worker."""

    run_id: str
    pid: int
    host: str


def encode_assignment(a: Assignment) -> bytes:
    return msgspec.json.encode(a)


def decode_assignment(data: bytes) -> Assignment:
    return msgspec.json.decode(data, type=Assignment)


def endpoints_of(a: Assignment) -> Endpoints:
    """The run's endpoints as the remote worker sees them: its inbox is the relay's."""
    eps = {"tokenizer": a.tokenizer, "scheduler": a.scheduler, "detokenizer": a.detokenizer}
    eps[a.role] = a.inbox
    return Endpoints(control=a.control, frontends=dict(a.frontends), **eps)


class _RemoteHandle:
    """Looks like a process to the launcher: alive while the beats come (or before the first)."""

    def __init__(self) -> None:
        self.last_beat: float | None = None
        self.pid: int | None = None
        self.host = ""
        self.exitcode: int | None = None
        self.gone = threading.Event()

    def is_alive(self) -> bool:
        if self.gone.is_set():
            return False
        if self.last_beat is not None and time.monotonic() - self.last_beat > HEARTBEAT_TIMEOUT_S:
            self.gone.set()
        return not self.gone.is_set()

    def join(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or 0.0)
        while self.is_alive() and time.monotonic() < deadline:
            self.gone.wait(0.05)


@dataclass
class RemoteWorker(Worker):
    """A worker on another host, known by its heartbeat; with ``wait_s`` > 0 the service waits
    that long for another one to join (health 503 meanwhile) before it gives up."""

    reason: str = ""
    wait_s: float = 0.0
    rejoining: bool = False  # set while waiting; cleared by the newcomer's Ready (serve.py)
    closer: Callable[[], None] | None = None  # stops the launcher's threads for it

    def close(self) -> None:
        if self.closer is not None:
            self.closer()

    async def rejoin(self) -> bool:
        """Wait up to ``wait_s`` for a new worker's Ready; True if one came."""
        import asyncio

        log.warning("%s; waiting up to %.0f s for it to join again", self.describe_exit(),
                    self.wait_s)
        handle = self.handle
        handle.gone.clear()
        handle.last_beat, handle.pid = None, None
        self.rejoining = True
        deadline = time.monotonic() + self.wait_s
        while self.rejoining and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return not self.rejoining

    def describe_exit(self) -> str:
        where = f" (pid {self.handle.pid} on {self.handle.host})" if self.handle.pid else ""
        return self.reason or (f"the remote {self.name}{where} is gone: no heartbeat for "
                               f"{HEARTBEAT_TIMEOUT_S:.0f} s")


class RemoteRole:
    """The launcher's side of one remote role: hello publisher, inbox relay, heartbeat reader."""

    def __init__(self, transport: Transport, run_dir: Path, endpoints: Endpoints, role: str,
                 config: LaunchConfig, max_context: int, address: str | None = None,
                 wait_s: float = 0.0) -> None:
        if role not in REMOTE_ROLES:
            raise ValueError(f"--remote {role!r}: one of {', '.join(REMOTE_ROLES)}")
        if not transport.multiprocess:
            raise ValueError(f"--remote needs a network transport (zmq, nng), not {transport.name}")
        self.role = role
        self.address = address or transport.endpoint(run_dir, "hello")
        remote_inbox = transport.endpoint(run_dir, f"{role}.remote")
        heartbeat = transport.endpoint(run_dir, "heartbeat")
        self.assignment = Assignment(
            run_id=run_dir.name, role=role, config=config.to_dict(), inbox=remote_inbox,
            heartbeat=heartbeat, tokenizer=endpoints.tokenizer, scheduler=endpoints.scheduler,
            detokenizer=endpoints.detokenizer, control=endpoints.control,
            frontends=dict(endpoints.frontends), max_context=max_context)
        inbox = getattr(endpoints, role)
        self._hello = transport.pub(self.address, bind=True)
        self._relay_in = transport.pull(inbox, bind=True)
        self._relay_out = transport.push(remote_inbox, bind=True)
        self._beats = transport.pull(heartbeat, bind=True)
        self.handle = _RemoteHandle()
        self.worker = RemoteWorker(role, self.handle, role, wait_s=wait_s, closer=self.close)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=target, name=f"remote-{role}-{name}",
                                          daemon=True)
                         for target, name in ((self._publish, "hello"), (self._relay, "relay"),
                                              (self._read_beats, "heartbeat"))]
        for thread in self._threads:
            thread.start()
        log.info("waiting for the remote %s: on its host run `minisgl worker --role %s "
                 "--transport %s --connect %s --keys DIR`", role, role, transport.name,
                 self.address)

    def _publish(self) -> None:
        data = encode_assignment(self.assignment)
        while not self._stop.wait(HELLO_INTERVAL_S):
            try:
                self._hello.send(data)
            except ChannelClosed:
                return

    def _relay(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._relay_in.recv(timeout=RECV_WAIT_S)
            except TimeoutError:
                continue
            except ChannelClosed:
                return
            try:  # blocks while the worker is away: messages wait here, bounded by hwm
                self._relay_out.send(data)
            except ChannelClosed:
                return

    def _read_beats(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._beats.recv(timeout=RECV_WAIT_S)
            except TimeoutError:
                continue
            except ChannelClosed:
                return
            try:
                beat = msgspec.json.decode(data, type=Beat)
            except msgspec.DecodeError:
                log.warning("remote %s: dropped a malformed heartbeat", self.role)
                continue
            if beat.run_id != self.assignment.run_id:
                continue  # a worker of an earlier run still beating
            if self.handle.pid is None:
                log.info("remote %s joined: pid %d on %s", self.role, beat.pid, beat.host)
            self.handle.pid, self.handle.host = beat.pid, beat.host
            self.handle.last_beat = time.monotonic()

    def close(self) -> None:
        """Stop the threads before the transport closes their sockets: nng frees a socket
        that a receive with a timeout still waits on, and that timeout's expiry then locks the
        freed memory (``panic: pthread_mutex_lock: Invalid argument``, the launcher's exit code
        -6). Each receive waits at most ``RECV_WAIT_S``; a relay blocked sending to a worker
        that left is woken by the transport's close."""
        self._stop.set()
        deadline = time.monotonic() + 10 * RECV_WAIT_S  # they leave within one wait
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


__all__ = ["Assignment", "Beat", "RemoteRole", "RemoteWorker", "decode_assignment",
           "endpoints_of"]
