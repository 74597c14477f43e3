"""The transport contract, run against the nng plugin."""

from __future__ import annotations

from minisgl_core.testing import TransportContract


class TestNngContract(TransportContract):
    transport = "nng"
    plugins = ("minisgl_transport_nng",)
