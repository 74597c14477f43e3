"""minisgl plugin: the ``nng`` transport (pynng Push0/Pull0 and Pub0/Sub0 over ipc or tcp).

Only the registration lives here; pynng itself is imported when the transport is first built.
"""

from __future__ import annotations

from minisgl_core.api import Register, hookimpl

__version__ = "0.1.0"


@hookimpl
def minisgl_register_transports(register: Register) -> None:
    register("nng", "minisgl_transport_nng.transport:NngTransport")
