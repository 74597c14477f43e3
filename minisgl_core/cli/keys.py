"""``minisgl keys new DIR``: the keys that tcp endpoints leaving this host need."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from minisgl_core.cli.common import fail, state
from minisgl_core.plugin.registry import RegistryError

keys_app = typer.Typer(no_args_is_help=True,
                       help="Keys for tcp endpoints (zmq CURVE, nng TLS) that leave the host.")


@keys_app.command("new")
def keys_new(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="Where to write them (made 0700).")],
    transport: Annotated[list[str] | None, typer.Option(
        help="Only for these transports (repeat); default: every one that has keys.")] = None,
    force: Annotated[bool, typer.Option(help="Replace keys already there.")] = False,
) -> None:
    """Write fresh keys for every transport that offers tcp, one subdirectory each (0600 files).

    Every process of one service needs the same directory: copy it to another host over a
    channel you trust, then set e.g. -s transports.zmq.endpoints=tcp -s transports.zmq.keys=DIR.
    """
    from minisgl_core.plugin.transport_tcp import write_all_keys

    try:
        written = write_all_keys(state(ctx).regs, directory, transport or None, force=force)
    except (RegistryError, ValueError, OSError) as exc:
        raise fail(str(exc), 1) from None
    if not written:
        raise fail("no installed transport has keys to write", 1)
    for name, files in written.items():
        typer.echo(f"{name}: " + ", ".join(str(f) for f in files))
        typer.echo(f"  use: -s transports.{name}.endpoints=tcp "
                   f"-s transports.{name}.keys={directory}")
