"""``minisgl worker``: one role of a service whose launcher runs on another host (``--remote``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from typing import Any

import msgspec

from minisgl_core.interfaces import ChannelClosed
from minisgl_core.service import remote
from minisgl_core.service.spec import WorkerSpec
from minisgl_core.service.worker import exit_now, run_command, set_title

log = logging.getLogger("minisgl.worker")


def run_remote(role: str, connect: str, transport_name: str, table: dict[str, Any], *,
               model_dir: str | None, num_threads: int | None, timeout_s: float) -> int:
    """Join the launcher at ``connect``, run ``role`` until Shutdown; the exit code."""
    from minisgl_core.config.merge import from_file_form
    from minisgl_core.engine.config import threads_per_rank
    from minisgl_core.plugin.loading import build_manager, collect
    from minisgl_core.service.worker import run_role

    pm = build_manager()
    registries = collect(pm)
    transport = registries.transports.get(transport_name)(table)
    try:
        hello = transport.sub(connect)
        try:
            assignment = _first_assignment(hello, timeout_s)
        except TimeoutError:
            log.error("no assignment from %s within %.0f s (is the launcher up, are the keys "
                      "the same?)", connect, timeout_s)
            return 1
        if assignment.role != role:
            log.error("the launcher at %s waits for a remote %s, not a %s", connect,
                      assignment.role, role)
            return 1
        config = from_file_form(assignment.config, source=connect)
        # this host's transport table (its keys, its ports) in place of the launcher's
        config = dataclasses.replace(config, transport=transport_name,
                                     transports={**config.transports, transport_name: table},
                                     model=model_dir or config.model)
        spec = WorkerSpec(role=role, config=config,  # type: ignore[arg-type]
                          endpoints=remote.endpoints_of(assignment),
                          model_dir=model_dir or config.model or "",
                          max_context=assignment.max_context,
                          num_threads=threads_per_rank(num_threads or config.num_threads, 1),
                          connect_inbox=True)
        log.info("joined %s as the %s (run %s)", connect, role, assignment.run_id)
        lost = threading.Event()
        threading.Thread(target=_keep_alive, args=(transport, hello, assignment, lost),
                         name="heartbeat", daemon=True).start()
        ok = run_role(spec, registries, transport, pm)
        return 0 if ok and not lost.is_set() else 1
    finally:
        transport.close()


def _first_assignment(hello: Any, timeout_s: float) -> remote.Assignment:
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            data = hello.recv(timeout=min(left, 1.0))
        except TimeoutError:
            continue
        try:
            return remote.decode_assignment(data)
        except msgspec.DecodeError:
            log.warning("dropped a malformed assignment from the launcher")


def _keep_alive(transport: Any, hello: Any, assignment: remote.Assignment,
                lost: threading.Event) -> None:
    """Beat to the launcher; without its hello for as long, it (or the network) is gone: exit."""
    threading.Thread(target=_beat, args=(transport, assignment), name="beats",
                     daemon=True).start()  # its own thread: a send to a gone launcher may block
    last_hello = time.monotonic()
    while True:
        try:
            while (data := hello.recv_nowait()) is not None:
                if remote.decode_assignment(data).run_id == assignment.run_id:
                    last_hello = time.monotonic()
        except ChannelClosed:
            return
        except msgspec.DecodeError:
            continue
        if time.monotonic() - last_hello > remote.HEARTBEAT_TIMEOUT_S:
            log.error("lost the launcher: no hello for %.0f s; exiting",
                      remote.HEARTBEAT_TIMEOUT_S)
            lost.set()
            exit_now(1)
        time.sleep(remote.HEARTBEAT_S)


def _beat(transport: Any, assignment: remote.Assignment) -> None:
    beats = transport.push(assignment.heartbeat)
    beat = msgspec.json.encode(remote.Beat(run_id=assignment.run_id, pid=os.getpid(),
                                           host=socket.gethostname()))
    while True:
        try:
            beats.send(beat)
        except ChannelClosed:
            return
        time.sleep(remote.HEARTBEAT_S)


def worker_command(role: str, connect: str, transport_name: str, table: dict[str, Any],
                   **options: Any) -> None:
    """``minisgl worker``'s body: log to stderr, run the role, exit with its code."""
    set_title(f"minisgl::{role}")  # named as the launcher's own workers are
    logging.basicConfig(level="INFO",
                        format=f"%(asctime)s remote-{role} %(levelname)s %(message)s")
    run_command(lambda: run_remote(role, connect, transport_name, table, **options),
                (ValueError, OSError))
