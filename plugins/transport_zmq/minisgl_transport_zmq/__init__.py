"""minisgl plugin: the ``zmq`` transport (pyzmq PUSH/PULL and PUB/SUB over ipc or tcp).

Only the registration lives here; zmq itself is imported when the transport is first built.
"""

from __future__ import annotations

from minisgl_core.api import Register, hookimpl

__version__ = "0.1.0"


@hookimpl
def minisgl_register_transports(register: Register) -> None:
    # the transport a service uses when none is named (LaunchConfig.transport unset)
    register("zmq", "minisgl_transport_zmq.transport:ZmqTransport", default=True)
