"""WorkerSpec: everything a spawned worker needs, as plain picklable data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

RoleName = Literal["tokenizer", "detokenizer", "scheduler"]


@dataclass(frozen=True)
class Endpoints:
    """Addresses of every channel of one run (the consumer binds, producers connect)."""

    tokenizer: str
    scheduler: str
    detokenizer: str
    control: str
    frontends: dict[str, str] = field(default_factory=dict)  # frontend id -> its inbound channel


@dataclass(frozen=True)
class WorkerSpec:
    """One worker's assignment: its role, the run's endpoints and the resolved model."""

    role: RoleName
    config: Any  # LaunchConfig; Any here so this module stays free of config imports
    endpoints: Endpoints
    model_dir: str
    max_context: int
    plugin_modules: tuple[str, ...] = ()
    num_threads: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    tp_rank: int = 0  # the scheduler's tensor-parallel rank; ranks > 0 only follow rank 0
    local_rank: int = 0  # its index among this host's ranks (picks cuda:<local_rank>)

    @property
    def name(self) -> str:
        """The process name: the role, with the rank for tensor-parallel followers."""
        return self.role if self.tp_rank == 0 else f"{self.role}-rank{self.tp_rank}"
