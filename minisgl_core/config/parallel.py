"""The launch config's tensor- and data-parallel keys: their text forms parsed, and checked."""

from __future__ import annotations

from typing import Protocol


class ParallelKeys(Protocol):
    """The launch config's parallel keys, as these checks read them."""

    @property
    def tp(self) -> int: ...

    @property
    def tp_local_ranks(self) -> str | None: ...

    @property
    def dist_port(self) -> int: ...

    @property
    def dp(self) -> int: ...

    @property
    def dp_cpus(self) -> str: ...

    @property
    def dp_affinity_threshold(self) -> int: ...

    def local_ranks(self) -> tuple[int, ...]: ...

    def dp_cpu_sets(self) -> list[set[int]]: ...


def cpu_sets(text: str) -> list[set[int]]:
    """The cores each replica is given by ``dp_cpus`` text (``"0-1;2,3"`` -> [{0, 1}, {2, 3}])."""
    out = []
    for part in text.split(";"):
        cores: set[int] = set()
        for item in filter(None, (x.strip() for x in part.split(","))):
            lo, _, hi = item.partition("-")
            cores.update(range(int(lo), int(hi or lo) + 1))
        out.append(cores)
    return out


def local_ranks(text: str | None, tp: int) -> tuple[int, ...]:
    """The ranks ``tp_local_ranks`` text names, sorted (all of 0..tp-1 when None)."""
    if text is None:
        return tuple(range(tp))
    return tuple(sorted(int(r) for r in text.split(",") if r.strip()))


def tp_problem(config: ParallelKeys) -> str | None:
    """What is wrong with ``tp_local_ranks`` (and the dist_port it needs), or None."""
    if config.tp_local_ranks is None:
        return None
    try:
        ranks = config.local_ranks()
    except ValueError:
        return f'tp_local_ranks must list ranks like "0" or "0,1", got "{config.tp_local_ranks}"'
    if not ranks or ranks[0] != 0 or ranks[-1] >= config.tp or len(set(ranks)) != len(ranks):
        return (f"tp_local_ranks must include rank 0 and name ranks below tp={config.tp} once "
                f'each, got "{config.tp_local_ranks}"')
    if len(ranks) < config.tp and config.dist_port == 0:
        return ("dist_port must be set when some ranks run elsewhere (tp_local_ranks): "
                "they connect to dist_addr:dist_port")
    return None


def dp_problem(config: ParallelKeys) -> str | None:
    """What is wrong with the data-parallel keys (``dp_*``), or None."""
    if config.dp_affinity_threshold < 0:
        return f"dp_affinity_threshold must be >= 0, got {config.dp_affinity_threshold}"
    if config.dp > 1 and config.tp_local_ranks is not None:
        return "dp > 1 needs every tensor-parallel rank on this host (no tp_local_ranks)"
    if config.dp_cpus.strip() in ("", "none"):
        return None
    try:
        sets = config.dp_cpu_sets()
    except ValueError:
        sets = []
    if len(sets) != config.dp or not all(sets):
        return (f'dp_cpus must list {config.dp} core sets split by ";" (e.g. "0-1;2-3"), '
                f'"" or "none", got "{config.dp_cpus}"')
    return None
