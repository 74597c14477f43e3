"""Serving phase of the launcher: run the frontends, relay worker stats, supervise, shut down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from minisgl_core.interfaces import ChannelClosed
from minisgl_core.plugin import listing
from minisgl_core.plugin.loading import configure, unconfigure
from minisgl_core.wire import codec
from minisgl_core.wire.schema import Fatal, Ready, Stats

if TYPE_CHECKING:
    from minisgl_core.plugin.manager import MinisglPluginManager
    from minisgl_core.plugin.registry import Registries
    from minisgl_core.service.running import Service

log = logging.getLogger("minisgl")

DEATH_GRACE_S = 0.5  # time for error events to reach clients before the server goes away
SUPERVISE_INTERVAL_S = 0.1


def serve_forever(service: Service, registries: Registries, pm: MinisglPluginManager) -> int:
    """Serve until a signal or a worker's death; stop everything; return the exit code."""
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            return runner.run(_serve(service, registries, pm))
    finally:
        service.stop()


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when installed (a third less CPU per streamed token in the frontends than
    asyncio's); ``MINISGL_EVENT_LOOP=asyncio`` keeps the standard one. None: asyncio's default."""
    if os.environ.get("MINISGL_EVENT_LOOP", "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def _serve(service: Service, registries: Registries, pm: MinisglPluginManager) -> int:
    config = service.config
    stop = asyncio.Event()
    failure: list[str] = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    frontends = []
    plugins = listing.as_dicts(listing.describe(pm, registries))  # the page lists them
    for name, client in zip(config.frontends, service.clients.values(), strict=True):
        client.set_plugins(plugins)
        client.start()
        factory = registries.frontends.get(name)
        frontends.append(factory(client, config, config.frontend_table(name)))
    configure(pm, config, "launcher")
    tasks = [asyncio.create_task(fe.serve(), name=f"frontend:{name}")
             for fe, name in zip(frontends, config.frontends, strict=True)]
    tasks.append(asyncio.create_task(_relay_control(service, failure, stop), name="control"))
    tasks.append(asyncio.create_task(_supervise(service, failure, stop), name="supervisor"))
    # each frontend logs its own address: the core knows none of them
    log.info("minisgl ready: plugins %s | transport %s | frontend %s | model %s (%s)",
             ", ".join(service.plugin_modules) or "-", config.transport,
             ",".join(config.frontends), service.ready_info.get("model_name", "?"),
             service.ready_info.get("max_seq_len", "?") + " tokens context")
    waiter = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([waiter, *tasks[: len(frontends)]],
                                 return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        if task is not waiter and task.exception() is not None:
            failure.append(f"frontend failed: {task.exception()!r}")
    reason = failure[0] if failure else "shutting down"
    log.info("stopping: %s", reason)
    for client in service.clients.values():
        client.fail_all(reason)
    if failure:
        await asyncio.sleep(DEATH_GRACE_S)
    for fe in frontends:
        with contextlib.suppress(Exception):
            await fe.shutdown()
    log.info("frontends stopped")
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in service.clients.values():
        await client.close()
    unconfigure(pm, config, "launcher")
    if failure:
        print(f"minisgl: {failure[0]}", file=sys.stderr)
        return 1
    return 0


async def _relay_control(service: Service, failure: list[str], stop: asyncio.Event) -> None:
    while True:
        try:
            data = await service.control.arecv()
        except ChannelClosed:
            return
        try:
            msg = codec.decode_control(data)
        except codec.DecodeError as exc:
            log.warning("launcher dropped a malformed control message: %s", exc)
            continue
        if isinstance(msg, Stats):
            for client in service.clients.values():
                client.update_metrics(msg)
        elif isinstance(msg, Fatal):
            failure.append(msg.describe())
            stop.set()
        elif isinstance(msg, Ready):
            _rejoined(service, msg)


def _rejoined(service: Service, msg: Ready) -> None:
    """A remote worker that joined again (service/remote.py): the engine is up again."""
    for worker in service.workers:
        if worker.name == msg.process and getattr(worker, "rejoining", False):
            worker.rejoining = False  # type: ignore[attr-defined]
            log.info("the remote %s joined again (pid %d)", worker.name, msg.pid)
            for client in service.clients.values():
                client.set_ready({**service.ready_info, **msg.info})


async def _supervise(service: Service, failure: list[str], stop: asyncio.Event) -> None:
    while not stop.is_set():
        for worker in service.workers:
            if not worker.alive():
                reason = worker.describe_exit()
                for client in service.clients.values():
                    client.fail_all(f"the engine is down: {reason}")
                # a remote worker may be waited for (--remote-wait): 503 until it is back
                if getattr(worker, "wait_s", 0.0) > 0 and await worker.rejoin():  # type: ignore[attr-defined]
                    continue
                failure.append(reason)
                stop.set()
                return
        await asyncio.sleep(SUPERVISE_INTERVAL_S)

