"""Opt-in test support for minisgl and its plugins: contract suites, fixtures and helpers.

``from minisgl_core.testing import TransportContract`` gives the transport contract suite
(``TcpTransportContract`` the same over tcp with keys), and
``TokenizerContract``, ``DetokenizerContract`` and ``SchedulerContract`` the role contracts; they
are imported lazily so that spawned helper processes do not pay for pytest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minisgl_core.testing.contract_roles import DetokenizerContract, TokenizerContract
    from minisgl_core.testing.contract_scheduler import SchedulerContract
    from minisgl_core.testing.transport_contract import TcpTransportContract, TransportContract

__all__ = ["DetokenizerContract", "SchedulerContract", "TcpTransportContract",
           "TokenizerContract", "TransportContract"]

_WHERE = {"TransportContract": "minisgl_core.testing.transport_contract",
          "TcpTransportContract": "minisgl_core.testing.transport_contract",
          "TokenizerContract": "minisgl_core.testing.contract_roles",
          "DetokenizerContract": "minisgl_core.testing.contract_roles",
          "SchedulerContract": "minisgl_core.testing.contract_scheduler"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'minisgl_core.testing' has no attribute {name!r}")
