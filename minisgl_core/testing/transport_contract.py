"""TransportContract: the behaviour every minisgl transport promises, as a pytest class.

Subclass it in a test module under a name pytest collects::

    class TestAcme(TransportContract):
        transport = "acme"                      # the registered name
        plugins = ["minisgl_transport_acme"]    # modules to load (None: every entry point)

Multi-process cases are skipped when the transport says ``multiprocess = False``. Nothing here
asserts on timing: waits are bounded, and a timeout is a failure only when nothing happened.

A transport that offers tcp endpoints (``NetworkOptions``) also subclasses
``TcpTransportContract``: the whole suite again over ``endpoints = "tcp"``, with keys written by
the transport's ``write_keys`` (``with_keys = False`` for plain loopback tcp), plus the tcp cases.
"""

from __future__ import annotations

from pathlib import Path

from minisgl_core.interfaces import Receiver, Sender, Transport
from minisgl_core.service.rundir import private_run_dir
from minisgl_core.testing.contract_delivery import DeliveryCases
from minisgl_core.testing.contract_lifecycle import LifecycleCases
from minisgl_core.testing.contract_pubsub import PubSubCases
from minisgl_core.testing.contract_tcp import TcpCases


class TransportContract(DeliveryCases, LifecycleCases, PubSubCases):
    """Inherit this and set ``transport`` (and usually ``plugins``) to check a transport.

    Settings: ``transport`` (registered name), ``plugins`` (modules to load; None: every entry
    point), ``options`` (the ``[transports.<name>]`` table), ``small_limit_options`` and
    ``max_buffered_messages`` (see ``ContractBase``).
    """

    # ---- shape ------------------------------------------------------------------------------

    def test_satisfies_the_protocols(self, tp: Transport, run_dir: Path) -> None:
        assert isinstance(tp, Transport)
        assert tp.name == self.transport
        assert isinstance(tp.multiprocess, bool)
        rx = tp.pull(tp.endpoint(run_dir, "shape"), bind=True)
        tx = tp.push(tp.endpoint(run_dir, "shape"))
        assert isinstance(rx, Receiver) and isinstance(tx, Sender)

    def test_endpoints_are_stable_and_distinct(self, tp: Transport, run_dir: Path) -> None:
        a = tp.endpoint(run_dir, "scheduler")
        assert isinstance(a, str) and a == tp.endpoint(run_dir, "scheduler")
        assert a != tp.endpoint(run_dir, "frontend.openai-1")
        with private_run_dir(prefix="mt-") as other:
            assert a != tp.endpoint(other, "scheduler")


class TcpTransportContract(TcpCases, TransportContract):
    """``TransportContract`` over tcp endpoints with keys, plus the tcp cases (``TcpCases``).

    Settings besides ``TransportContract``'s: ``with_keys`` (default True), ``refusal_pattern``
    (the warning logged for a refused peer; None to check behaviour only).
    """

    with_keys = True
