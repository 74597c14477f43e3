"""The engine's stats: one snapshot of its load and counters (``Engine.stats``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's load and counters."""

    running: int
    waiting: int
    pages_total: int
    pages_free: int  # allocatable now: on the free list or cached and used by no request
    page_size: int
    preemptions: int
    prompt_tokens: int  # admitted prompt tokens so far
    generated_tokens: int  # sampled tokens so far
    pages_cached: int = 0  # pages held by the prefix cache (some may be in use too)
    cache_hit_tokens: int = 0  # prompt tokens admissions took from the prefix cache
    spec_draft_tokens: int = 0  # speculative draft tokens proposed
    spec_accepted_tokens: int = 0  # of those, accepted by verification
    # /metrics series of the prefix cache by tier, (name, value) (prefix_disk.tier_metrics)
    prefix_tiers: tuple[tuple[str, float], ...] = ()
    decode_compiled: int = 0  # 1 once decode steps run as compiled graphs (engine/compiled.py)

    def as_dict(self) -> dict[str, int]:
        """The fields as a plain dict (for gauges and logs)."""
        return asdict(self)


__all__ = ["EngineStats"]
