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
    # Write keys with the transport's own ``write_keys`` and set its ``keys`` option (tcp + auth).
    with_keys: ClassVar[bool] = False
    key_root: ClassVar[str] = ""  # where they were written (set by the fixture below)

    # ---- fixtures ---------------------------------------------------------------------------

    def table(self, **options: Any) -> dict[str, Any]:
        """The options table the tests use: ``self.options``, the keys, then ``options``."""
        keys = {"keys": self.key_root} if self.with_keys else {}
        return {**self.options, **keys, **options}

    def make(self, **options: Any) -> Transport:
        """A new transport instance of this class's kind, with ``options`` over ``table()``."""
        return h.make_transport(self.transport, self.plugins, self.table(**options))

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _contract_keys(cls, tmp_path_factory: pytest.TempPathFactory) -> None:
        if cls.with_keys and not cls.key_root:
            cls.key_root = str(h.write_transport_keys(cls.transport, cls.plugins,
                                                      tmp_path_factory.mktemp("keys")))

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
