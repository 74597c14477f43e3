"""The transport contract, run against the core's inproc transport."""

from __future__ import annotations

from minisgl_core.testing import TransportContract


class TestInprocContract(TransportContract):
    transport = "inproc"
    plugins = ()
