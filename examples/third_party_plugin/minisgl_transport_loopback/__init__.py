"""Example third-party minisgl plugin: a transport, a frontend and a role in one distribution.

- transport ``loopback``: the zmq transport with every channel on a TCP port of 127.0.0.1;
- frontend ``lines``: a TCP server that takes one prompt per line and answers one JSON line;
- tokenizer role ``shout``: the HF tokenizer on upper-cased (or lower-cased) prompts.

This module is what the entry point names, so it is imported in every process of a service and
by ``minisgl plugins``: it stays light and only says where each part lives.
"""

from __future__ import annotations

from minisgl_core.api import Register, RoleRegister, hookimpl

__version__ = "0.1.0"


@hookimpl
def minisgl_register_transports(register: Register) -> None:
    register("loopback", "minisgl_transport_loopback.transport:LoopbackTransport")


@hookimpl
def minisgl_register_frontends(register: Register) -> None:
    register("lines", "minisgl_transport_loopback.lines:LinesFrontend")


@hookimpl
def minisgl_register_roles(register: RoleRegister) -> None:
    register("tokenizer", "shout", "minisgl_transport_loopback.shout:make_shout")
