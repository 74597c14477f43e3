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
