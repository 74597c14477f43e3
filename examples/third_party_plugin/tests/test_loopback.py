"""The transport contract suite, run against the example plugin exactly as a third party would."""

from __future__ import annotations

import minisgl_transport_loopback

from minisgl_core.plugins import build_manager, collect
from minisgl_core.rundir import private_run_dir
from minisgl_core.testing import TransportContract


class TestLoopbackContract(TransportContract):
    transport = "loopback"
    plugins = ("minisgl_transport_loopback",)


def test_registered_lazily_under_its_own_name() -> None:
    regs = collect(build_manager(autoload=False, extra=[minisgl_transport_loopback]))
    entry = regs.transports.entry("loopback")
    assert entry.target == "minisgl_transport_loopback.transport:LoopbackTransport"


def test_every_process_of_a_run_agrees_on_a_channel_port() -> None:
    from minisgl_transport_loopback.transport import LoopbackTransport

    a, b = LoopbackTransport(), LoopbackTransport()
    try:
        with private_run_dir() as run_dir:
            ep = a.endpoint(run_dir, "scheduler")
            assert ep.startswith("tcp://127.0.0.1:")
            assert b.endpoint(run_dir, "scheduler") == ep  # read back from the run dir
            assert (run_dir / "scheduler.port").read_text() == ep.rsplit(":", 1)[1]
    finally:
        a.close()
        b.close()
