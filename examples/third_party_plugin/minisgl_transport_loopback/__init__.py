"""Example third-party minisgl plugin: registers the ``loopback`` transport.

This module is what the entry point names, so it is imported in every process of a service and
by ``minisgl plugins``: it stays light and only says where the transport lives.
"""

from __future__ import annotations

from typing import Any

from minisgl_core import hookimpl

__version__ = "0.1.0"


@hookimpl
def minisgl_register_transports(register: Any) -> None:
    register("loopback", "minisgl_transport_loopback.transport:LoopbackTransport")
