"""The launcher: resolve the model, spawn the workers, wait for Ready, then serve and supervise."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minisgl_core.service.rundir import make_run_dir
from minisgl_core.service.running import Service, Worker
from minisgl_core.service.spec import Endpoints, WorkerSpec
from minisgl_core.wire import codec
from minisgl_core.wire.schema import Fatal, Ready, Stats

if TYPE_CHECKING:
    from minisgl_core.config.launch import LaunchConfig
    from minisgl_core.interfaces import Transport
    from minisgl_core.plugin.manager import MinisglPluginManager
    from minisgl_core.plugin.registry import Registries

log = logging.getLogger("minisgl")


class LaunchError(RuntimeError):
    """The service could not start; the message says which part and why."""


def start_service(config: LaunchConfig, registries: Registries, model_dir: str, *,
                  plugin_modules: tuple[str, ...] = (), remote: str | None = None,
                  remote_address: str | None = None, remote_wait_s: float = 0.0) -> Service:
    """Spawn the workers and wait until each sent Ready; raise LaunchError naming a failure.

    ``remote`` names a role that a ``minisgl worker`` on another host runs (service/remote.py):
    it is waited for, supervised and stopped like a local one."""
    from minisgl_core.service.transport_client import TransportEngineClient

    if remote is not None and config.dp > 1:
        raise LaunchError("--remote runs one role elsewhere; it does not combine with --dp")
    context = max_context(model_dir, config.max_seq_len_override)
    try:
        config = registries.with_defaults(config)
    except LookupError as exc:
        raise LaunchError(str(exc)) from None
    name = config.transport
    try:  # bad options (a host, a port range, missing keys) are the user's to fix: one line
        transport = registries.transports.get(name)(config.transports.get(name, {}))
    except (ValueError, OSError) as exc:
        raise LaunchError(str(exc)) from None
    run_dir = make_run_dir()
    ep = lambda channel: transport.endpoint(run_dir, channel)  # noqa: E731
    frontend_ids = [f"{fe}-{os.getpid()}" for fe in config.frontends]
    try:
        endpoints = Endpoints(tokenizer=ep("tokenizer"), scheduler=ep("scheduler"),
                              detokenizer=ep("detokenizer"), control=ep("control"),
                              frontends={fid: ep(f"frontend.{fid}") for fid in frontend_ids},
                              schedulers=tuple(ep(f"scheduler.dp{i}") for i in range(config.dp))
                              if config.dp > 1 else ())
    except (ValueError, OSError) as exc:
        transport.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise LaunchError(str(exc)) from None
    # Consumers bind before any producer starts: control and every frontend inbox first.
    control = transport.pull(endpoints.control, bind=True)
    clients = {fid: TransportEngineClient(transport, endpoints.frontends[fid],
                                          endpoints.tokenizer, fid,
                                          max_waiting=config.max_waiting_requests)
               for fid in frontend_ids}
    try:
        _check_parallel(config, transport)
        replicas = [_replica_config(config) for _ in range(config.dp)]
    except LaunchError:
        control.close()
        transport.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    config = replicas[0]
    common = {"endpoints": endpoints, "model_dir": model_dir, "max_context": context,
              "plugin_modules": plugin_modules}
    specs = [WorkerSpec(role=role, config=config, **common)  # type: ignore[arg-type]
             for role in ("tokenizer", "detokenizer")]
    specs += _scheduler_specs(replicas, common)
    remote_workers = []
    if remote is not None:
        from minisgl_core.service.remote import RemoteRole

        try:
            remote_role = RemoteRole(transport, run_dir, endpoints, remote, config, context,
                                     remote_address, remote_wait_s)
        except (ValueError, OSError) as exc:
            control.close()
            transport.close()
            shutil.rmtree(run_dir, ignore_errors=True)
            raise LaunchError(str(exc)) from None
        remote_workers.append(remote_role.worker)
        specs = [s for s in specs if s.role != remote]
    workers = _spawn(specs, transport, registries) + remote_workers
    service = Service(config, transport, run_dir, endpoints, workers, clients, control,
                      plugin_modules=plugin_modules)
    try:
        service.ready_info = _wait_ready(service, config.ready_timeout_s)
    except BaseException:
        service.stop()
        raise
    for client in clients.values():
        client.set_ready(service.ready_info)
    return service


def _spawn(specs: list[WorkerSpec], transport: Transport, registries: Registries) -> list[Worker]:
    from minisgl_core.service.worker import run_role, worker_main

    workers = []
    if transport.multiprocess:
        ctx = mp.get_context("spawn")
        for spec in specs:
            proc = ctx.Process(target=worker_main, args=(spec,), name=f"minisgl::{spec.name}")
            proc.start()
            workers.append(Worker(spec.role, proc, spec.name))
    else:
        # transformers' lazy imports are not thread-safe: resolve them before the threads start
        import transformers

        _ = transformers.AutoTokenizer, transformers.PreTrainedTokenizerFast
        for spec in specs:
            thread = threading.Thread(target=run_role, args=(spec, registries, transport),
                                      name=f"minisgl::{spec.role}", daemon=True)
            thread.start()
            workers.append(Worker(spec.role, thread, spec.name))
    return workers


def _wait_ready(service: Service, timeout: float) -> dict[str, str]:
    waiting = {w.name for w in service.workers}
    info: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while waiting:
        for w in service.workers:
            if w.name in waiting and not w.alive():
                raise LaunchError(_pending_fatal(service)
                                  or f"{w.describe_exit()} during setup")
        if time.monotonic() > deadline:
            raise LaunchError(f"timed out after {timeout:.0f} s waiting for: "
                              + ", ".join(sorted(waiting)))
        try:
            msg = codec.decode_control(service.control.recv(timeout=0.2))
        except TimeoutError:
            continue
        except codec.DecodeError as exc:
            log.warning("launcher dropped a malformed control message: %s", exc)
            continue
        if isinstance(msg, Fatal):
            raise LaunchError(msg.describe())
        if isinstance(msg, Ready):
            waiting.discard(msg.process)
            info.update(msg.info)
        elif isinstance(msg, Stats):
            for client in service.clients.values():
                client.update_metrics(msg)
    return info


def _pending_fatal(service: Service) -> str | None:
    """The error of a Fatal already waiting on the control channel: a worker that failed says
    why before it exits, and that beats "it died" when its exit is seen first."""
    while (data := service.control.recv_nowait()) is not None:
        try:
            msg = codec.decode_control(data)
        except codec.DecodeError:
            continue
        if isinstance(msg, Fatal):
            return msg.describe()
    return None


def _scheduler_specs(replicas: list[LaunchConfig], common: dict[str, Any]) -> list[WorkerSpec]:
    """Every scheduler process: each replica's tensor-parallel ranks, with their cores."""
    from minisgl_core.engine.config import threads_per_rank

    config = replicas[0]
    ranks = config.local_ranks()
    dp = len(replicas)
    cpus = replica_cpus(config) if dp > 1 else [()]
    specs = []
    for d, cfg in enumerate(replicas):
        if cpus[d] and config.num_threads is None:
            replica_threads = len(cpus[d])  # pinned: one thread for each of its own cores
        else:
            replica_threads = threads_per_rank(config.num_threads, dp)  # its share of the host
        threads = threads_per_rank(replica_threads, len(ranks))  # split between its ranks
        specs += [WorkerSpec(role="scheduler", config=cfg, num_threads=threads, tp_rank=rank,
                             local_rank=d * len(ranks) + i, dp_rank=d if dp > 1 else None,
                             cpus=cpus[d], **common) for i, rank in enumerate(ranks)]
    return specs


def replica_cpus(config: LaunchConfig) -> list[tuple[int, ...]]:
    """Each replica's cores: ``dp_cpus`` when given, else this process's cores split in ``dp``
    runs (a core is shared when there are fewer cores than replicas); ``none``: unpinned."""
    if config.dp_cpus.strip() == "none" or not hasattr(os, "sched_getaffinity"):
        return [()] * config.dp
    if config.dp_cpus.strip():
        return [tuple(sorted(c)) for c in config.dp_cpu_sets()]
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // config.dp)
    return [tuple(cores[(d * share + k) % len(cores)] for k in range(share))
            for d in range(config.dp)]


def _check_parallel(config: LaunchConfig, transport: Transport) -> None:
    """Refuse tensor- and data-parallel settings this transport or config cannot run."""
    for flag, size, unit in (("--dp", config.dp, "replica"), ("--tp", config.tp, "rank")):
        if size > 1 and not transport.multiprocess:
            raise LaunchError(f"{flag} {size} needs a multi-process transport (zmq, nng), "
                              f"not {config.transport}: each {unit} is a process")
    if config.dp > 1 and config.tp > 1 and config.dist_port:
        raise LaunchError("--dp with --tp picks a free dist_port per replica: leave dist_port 0")


def _replica_config(config: LaunchConfig) -> LaunchConfig:
    """One replica's config: a free dist_port of its own when its ranks need one (tp > 1,
    dist_port 0: all ranks local)."""
    if config.tp == 1 or config.dist_port:
        return config
    from minisgl_core.service.ports import free_port

    return dataclasses.replace(config, dist_port=free_port(config.dist_addr))


def max_context(model_dir: str, override: int | None) -> int:
    """The context length a run serves: the model's, capped by ``max_seq_len_override``."""
    import json

    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        limit = int(cfg.get("max_position_embeddings", 2048))
    except (OSError, ValueError) as exc:
        raise LaunchError(f"cannot read {model_dir}/config.json: {exc}") from exc
    return min(limit, override) if override else limit


def launch(config: LaunchConfig, pm: MinisglPluginManager | None = None, *,
           remote: str | None = None, remote_address: str | None = None,
           remote_wait_s: float = 0.0) -> int:
    """Run the service until SIGINT/SIGTERM or a worker's death; return the exit code.

    ``pm`` is the caller's plugin manager (the CLI's), so plugins load and report once;
    ``remote`` a role run by ``minisgl worker`` elsewhere (see ``start_service``).
    """
    from minisgl_core.plugin.loading import build_manager, collect
    from minisgl_core.plugin.model_lookup import (
        ModelNotFoundError,
        check_supported,
        resolve_model,
    )
    from minisgl_core.service.serve import serve_forever

    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    pm = pm or build_manager()
    registries = collect(pm)
    try:
        try:  # once per service: the workers (and tp ranks started here) get the directory
            model_dir = resolve_model(pm, config.model, revision=config.revision,
                                      gguf_file=config.gguf_file,
                                      architectures=registries.models.names())
            check_supported(registries.models, model_dir)  # here, not in a worker
        except ModelNotFoundError as exc:
            raise LaunchError(str(exc)) from None
        config = dataclasses.replace(config, model=model_dir, revision=None, gguf_file=None)
        service = start_service(config, registries, model_dir,
                                plugin_modules=tuple(_plugin_modules(pm)), remote=remote,
                                remote_address=remote_address, remote_wait_s=remote_wait_s)
    except LaunchError as exc:
        print(f"minisgl: {exc}", file=sys.stderr)
        return 1
    return serve_forever(service, registries, pm)


def _plugin_modules(pm: MinisglPluginManager) -> list[str]:
    from minisgl_core.plugin import loading as plugins

    return list(plugins.loaded_module_names(pm))


__all__ = ["LaunchError", "Service", "Worker", "launch", "start_service"]
