"""WorkerSpec: everything a spawned worker needs, as plain picklable data; RoleContext: what
a role factory gets in that worker."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from minisgl_core import deprecated
from minisgl_core.interfaces import RoleKind

if TYPE_CHECKING:
    from minisgl_core.config.launch import LaunchConfig
    from minisgl_core.plugin.registry import Registry


@dataclass(frozen=True)
class Endpoints:
    """Addresses of every channel of one run (the consumer binds, producers connect)."""

    tokenizer: str
    scheduler: str
    detokenizer: str
    control: str
    frontends: dict[str, str] = field(default_factory=dict)  # frontend id -> its inbound channel
    schedulers: tuple[str, ...] = ()  # each replica's inbox under --dp N (empty: ``scheduler``)

    def scheduler_inbox(self, dp_rank: int) -> str:
        """The inbox of scheduler replica ``dp_rank``."""
        return self.schedulers[dp_rank] if self.schedulers else self.scheduler


@dataclass(frozen=True)
class WorkerSpec:
    """One worker's assignment: its role, the run's endpoints and the resolved model."""

    role: RoleKind
    config: LaunchConfig
    endpoints: Endpoints
    model_dir: str
    max_context: int
    plugin_modules: tuple[str, ...] = ()
    num_threads: int = 1
    tp_rank: int = 0  # the scheduler's tensor-parallel rank; ranks > 0 only follow rank 0
    local_rank: int = 0  # its index among this host's ranks (picks cuda:<local_rank>)
    connect_inbox: bool = False  # a remote worker connects to the launcher's relay (remote.py)
    dp_rank: int | None = None  # the scheduler replica it belongs to under --dp N
    cpus: tuple[int, ...] = ()  # cores the process is pinned to (empty: not pinned)

    @property
    def name(self) -> str:
        """The process name: the role, with the replica (``-dp1``) and the tensor-parallel rank
        of a follower (``-rank1``)."""
        name = self.role if self.dp_rank is None else f"{self.role}-dp{self.dp_rank}"
        return name if self.tp_rank == 0 else f"{name}-rank{self.tp_rank}"


@dataclass(frozen=True)
class RoleContext:
    """What a role factory is called with: ``factory(context)`` returns the role.

    ``options`` is the ``[roles.<kind>.<name>]`` table of the selected implementation (empty
    when absent; the role validates it); ``models`` is the model registry, for roles that
    build a model (``model_lookup.model_class(context.models, context.spec.model_dir)``).
    """

    spec: WorkerSpec
    options: Mapping[str, Any]
    models: Registry[Any]

    def __getattr__(self, name: str) -> Any:
        # A factory written for the old signature, factory(spec: WorkerSpec), reads the spec's
        # fields off what it is given: hand them over, with a warning, until REMOVED_IN.
        if name not in _SPEC_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        warnings.warn(f"a role factory is called with a RoleContext (factory(spec: WorkerSpec) "
                      f"goes away in minisgl {deprecated.REMOVED_IN}): use context.spec.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(self.spec, name)


_SPEC_FIELDS = frozenset({f.name for f in fields(WorkerSpec)} | {"name"})

__getattr__ = deprecated.forwarder(__name__)  # RoleName is interfaces.RoleKind now
