"""The transport contract, run against the nng plugin: over ipc, and over tcp with and without
TLS."""

from __future__ import annotations

from minisgl_core.testing import TcpTransportContract, TransportContract


class TestNngContract(TransportContract):
    transport = "nng"
    plugins = ("minisgl_transport_nng",)


class TestNngTcpTlsContract(TcpTransportContract):
    """Over tls+tcp on 127.0.0.1 with the service's certificates."""

    transport = "nng"
    plugins = ("minisgl_transport_nng",)


class TestNngTcpPlainContract(TcpTransportContract):
    """Over loopback tcp without keys."""

    transport = "nng"
    plugins = ("minisgl_transport_nng",)
    with_keys = False
