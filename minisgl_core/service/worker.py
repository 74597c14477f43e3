"""Worker bootstrap: the entry point of every spawned process, and of every in-process thread."""

from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from minisgl_core.parent_death import die_with_parent
from minisgl_core.service import omp_wait
from minisgl_core.service.spec import RoleContext, WorkerSpec
from minisgl_core.wire import codec
from minisgl_core.wire.schema import Fatal, Message, Ready, Stats

if TYPE_CHECKING:
    from minisgl_core.interfaces import Sender, Transport
    from minisgl_core.plugin.manager import MinisglPluginManager
    from minisgl_core.plugin.registry import Registries

log = logging.getLogger(__name__)


def worker_main(spec: WorkerSpec) -> None:
    """Entry point of a spawned worker: rebuild plugins, open the transport, run the role."""
    die_with_parent()
    if spec.cpus and hasattr(os, "sched_setaffinity"):  # before torch sizes its thread pool
        os.sched_setaffinity(0, spec.cpus)
    if spec.role == "scheduler":  # before torch loads libgomp
        omp_wait.short_spin(os.environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher leads shutdown
    set_title(f"minisgl::{spec.name}")
    logging.basicConfig(level=getattr(spec.config, "log_level", "INFO").upper(),
                        format=f"%(asctime)s {spec.name} %(levelname)s %(message)s")
    from minisgl_core.plugin.loading import build_manager, collect

    pm = build_manager(autoload=False, extra=list(spec.plugin_modules))
    registries = collect(pm)
    name = spec.config.transport
    transport = registries.transports.get(name)(spec.config.transports.get(name, {}))
    try:
        ok = run_role(spec, registries, transport, pm)
    finally:
        transport.close()
    log.info("%s stopped", spec.name)
    exit_now(0 if ok else 1)


def exit_now(code: int) -> NoReturn:
    """Leave this worker process with ``code``: logs and streams flushed, interpreter teardown
    skipped (everything is closed; teardown takes seconds with torch loaded, and a process
    group whose peer is gone aborts in its destructor)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_command(body: Callable[[], int], errors: tuple[type[Exception], ...]) -> NoReturn:
    """A worker command's body (``minisgl worker``, ``minisgl tp-worker``): run ``body``, print
    one of ``errors`` as ``minisgl: error: ...`` (exit code 1), and exit with its code."""
    try:
        code = body()
    except errors as exc:
        print(f"minisgl: error: {exc}", file=sys.stderr)
        code = 1
    exit_now(code)


def run_role(spec: WorkerSpec, registries: Registries, transport: Transport,
             pm: MinisglPluginManager | None = None) -> bool:
    """Build this worker's role, send Ready, run its loop; on failure send Fatal. True if clean.

    ``pm`` is given in a process of the worker's own: the plugins' ``minisgl_configure`` and
    ``minisgl_unconfigure`` then run first and last, with the role as the process name.
    """
    from minisgl_core.plugin.loading import configure, unconfigure

    control = transport.push(spec.endpoints.control)

    def report(msg: Message) -> None:
        control.send(codec.encode(msg))

    try:
        if pm is not None:
            configure(pm, spec.config, spec.role)
        _run(spec, registries, transport, report)
        return True
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        log.error("%s failed: %s\n%s", spec.name, detail, traceback.format_exc())
        try:
            report(Fatal(process=spec.name, pid=os.getpid(), error=detail))
        except Exception:  # noqa: BLE001 - the launcher also watches exit codes
            pass
        return False
    finally:
        if pm is not None:
            try:
                unconfigure(pm, spec.config, spec.role)
            except Exception:  # noqa: BLE001 - a plugin's cleanup must not hide the outcome
                log.exception("%s: minisgl_unconfigure failed", spec.name)
        control.close()


def _run(spec: WorkerSpec, registries: Registries, transport: Transport, report: Any) -> None:
    from minisgl_core.service.dispatch import Dispatcher
    from minisgl_core.service.scheduler_loop import SchedulerLoop
    from minisgl_core.service.text_loops import run_detokenizer, run_tokenizer

    # the role selected by --tokenizer/--detokenizer/--scheduler, with its [roles.<kind>.<name>]
    name = spec.config.role_name(spec.role)
    context = RoleContext(spec, spec.config.role_table(spec.role, name), registries.models)
    role = registries.roles[spec.role].get(name)(context)
    ep = spec.endpoints
    ready = Ready(process=spec.name, pid=os.getpid())
    bind = not spec.connect_inbox
    if spec.role == "tokenizer":
        inbox = transport.pull(ep.tokenizer, bind=bind)
        cfg = spec.config
        outbox = Dispatcher([transport.push(a) for a in ep.schedulers or (ep.scheduler,)],
                            policy=getattr(cfg, "dp_policy", "cache_aware"),
                            threshold=getattr(cfg, "dp_affinity_threshold", 4),
                            page_size=cfg.page_size)
        replies = {fid: transport.push(addr) for fid, addr in ep.frontends.items()}
        report(ready)
        run_tokenizer(role, inbox, outbox, report, replies)
    elif spec.role == "detokenizer":
        inbox = transport.pull(ep.detokenizer, bind=bind)
        outboxes = {fid: transport.push(addr) for fid, addr in ep.frontends.items()}
        report(ready)
        run_detokenizer(role, inbox, outboxes, report)
    elif spec.tp_rank > 0:  # a tensor-parallel follower: no inbox, no outbox
        report(ready)
        role.follow()
    else:
        inbox = transport.pull(ep.scheduler_inbox(spec.dp_rank or 0), bind=bind)
        outbox = transport.push(ep.detokenizer)
        if spec.dp_rank is not None:  # the tokenizer dispatches by the replicas' reports too
            report = _also_to(transport.push(ep.tokenizer), report)
        loop = SchedulerLoop(role, inbox, outbox, report, dp_rank=spec.dp_rank)
        waiting = omp_wait.describe(os.environ)
        log.info("OpenMP threads: %s", waiting)
        report(Ready(process=spec.name, pid=os.getpid(),
                     info={**role.info(), "omp_wait": waiting}))
        report(loop.stats())
        loop.run()
    # after a clean exit only (tensor parallelism: rank 0 stops the follower ranks here); after
    # a failure the group may be broken, and the process exit releases everything anyway
    role.close()


def _also_to(tokenizer: Sender, report: Callable[[Message], None]
             ) -> Callable[[Message], None]:
    """``report``, which also sends each Stats to the tokenizer (its dispatcher reads them)."""
    def both(msg: Message) -> None:
        report(msg)
        if isinstance(msg, Stats):
            tokenizer.send(codec.encode(msg))

    return both


def set_title(title: str) -> None:
    """Name this process ``title`` in ps and top (when setproctitle is installed)."""
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except ImportError:
        pass
