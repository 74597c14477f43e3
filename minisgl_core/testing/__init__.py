"""Opt-in test support for minisgl and its plugins: contract suites, fixtures and helpers.

``from minisgl_core.testing import TransportContract`` gives the transport contract suite; it is
imported lazily so that spawned helper processes do not pay for pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minisgl_core.testing.transport_contract import TransportContract

__all__ = ["TransportContract"]


def __getattr__(name: str) -> Any:
    if name == "TransportContract":
        from minisgl_core.testing.transport_contract import TransportContract

        return TransportContract
    raise AttributeError(f"module 'minisgl_core.testing' has no attribute {name!r}")
