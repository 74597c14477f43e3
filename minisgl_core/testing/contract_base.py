"""The fixtures and settings every part of the transport contract shares."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from minisgl_core.interfaces import Receiver, Sender, Transport
from minisgl_core.service.rundir import private_run_dir
from minisgl_core.testing import transports as h


class ContractBase:
    """Settings a subclass overrides, and the fixtures the contract's tests use."""

    transport: ClassVar[str] = ""
    plugins: ClassVar[Sequence[str] | None] = None
    options: ClassVar[Mapping[str, Any]] = {}
    # Options that make the sender-side size limit small (the MessageTooLarge test).
    small_limit_options: ClassVar[Mapping[str, Any]] = {"max_message_bytes": 4096}
    # How many 1 KiB messages a pipeline may buffer to a reader that stopped before send blocks.
    max_buffered_messages: ClassVar[int] = 100_000

    # ---- fixtures ---------------------------------------------------------------------------

    def make(self, **options: Any) -> Transport:
        """A new transport instance of this class's kind, with ``options`` over ``self.options``."""
        return h.make_transport(self.transport, self.plugins, {**self.options, **options})

    @pytest.fixture
    def run_dir(self) -> Iterator[Path]:
        with private_run_dir(prefix="mt-") as path:
            yield path

    @pytest.fixture
    def tp(self) -> Iterator[Transport]:
        transport = self.make()
        try:
            yield transport
        finally:
            transport.close()

    @pytest.fixture
    def pipe(self, tp: Transport, run_dir: Path) -> tuple[Sender, Receiver]:
        """A bound receiver and a connected sender on one endpoint."""
        rx = tp.pull(tp.endpoint(run_dir, "pipe"), bind=True)
        return tp.push(tp.endpoint(run_dir, "pipe")), rx

    def _need_multiprocess(self, tp: Transport) -> None:
        if not tp.multiprocess:
            pytest.skip(f"transport {self.transport} works inside one process only")
