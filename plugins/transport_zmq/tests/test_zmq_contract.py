"""The transport contract, run against the zmq plugin."""

from __future__ import annotations

from minisgl_core.testing import TransportContract


class TestZmqContract(TransportContract):
    transport = "zmq"
    plugins = ("minisgl_transport_zmq",)
