"""The transport contract, run against the zmq plugin: over ipc, and over tcp with and without
CURVE."""

from __future__ import annotations

from minisgl_core.testing import TcpTransportContract, TransportContract


class TestZmqContract(TransportContract):
    transport = "zmq"
    plugins = ("minisgl_transport_zmq",)


class TestZmqTcpCurveContract(TcpTransportContract):
    """Over tcp on 127.0.0.1 with CURVE keys."""

    transport = "zmq"
    plugins = ("minisgl_transport_zmq",)


class TestZmqTcpPlainContract(TcpTransportContract):
    """Over loopback tcp without keys."""

    transport = "zmq"
    plugins = ("minisgl_transport_zmq",)
    with_keys = False
