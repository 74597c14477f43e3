"""``minisgl worker``: run one role of a service whose launcher is on another host."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from minisgl_core.cli.common import SetOpt, fail, lazy_entry, load, state

ROLES = ("tokenizer", "scheduler", "detokenizer")


def worker(
    ctx: typer.Context,
    role: Annotated[str, typer.Option(help="tokenizer, scheduler or detokenizer: the role the "
                                           "launcher's --remote names.")],
    connect: Annotated[str, typer.Option(
        help="The address the launcher logs (tcp://HOST:PORT; tls+tcp:// for nng).")],
    keys: Annotated[Path | None, typer.Option(
        help="The launcher's key directory (`minisgl keys new`), copied to this host.")] = None,
    transport: Annotated[str, typer.Option(help="The launcher's transport: zmq or nng.")] = "zmq",
    model: Annotated[str | None, typer.Option(
        help="The model on this host (a directory or Hub id); unset: the launcher's path.")] = None,
    num_threads: Annotated[int | None, typer.Option(help="Torch threads of the scheduler.")] = None,
    timeout: Annotated[float, typer.Option(
        help="Seconds to wait for the launcher's assignment.")] = 300.0,
    set_: SetOpt = None,
) -> None:
    """Join a `minisgl launch --remote ROLE` from this host: one address and the keys."""
    if role not in ROLES:
        raise fail(f"--role {role!r}: one of {', '.join(ROLES)}")
    cfg = load(None, {}, set_ or [])
    table = {**cfg.transports.get(transport, {}), "endpoints": "tcp"}
    if keys is not None:
        table["keys"] = str(keys)
    model_dir = None
    if model is not None:
        from minisgl_core.plugin.model_lookup import ModelNotFoundError, resolve

        try:
            model_dir = resolve(model, state(ctx).pm).path
        except ModelNotFoundError as exc:
            raise fail(str(exc), 1) from None
    run = lazy_entry("minisgl_core.service.remote_worker:worker_command", "remote workers")
    run(role, connect, transport, table, model_dir=model_dir, num_threads=num_threads,
        timeout_s=timeout)
