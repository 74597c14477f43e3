"""What a load run measured: one request (Record), one concurrency level (ServeResult), and the
percentile, markdown and option-checking helpers the benchmarks share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


def known_names(kind: str, names: Sequence[str], known: Sequence[str]) -> list[str]:
    """``names`` once each, in order, if each is in ``known``; else ValueError naming them
    ("unknown peer 'x': known peers are vllm, llamacpp")."""
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {kind} {', '.join(map(repr, unknown))}: "
                         f"known {kind}s are {', '.join(known)}")
    return list(dict.fromkeys(names))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default); NaN when empty."""
    xs = sorted(v for v in values if not math.isnan(v))
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Record:
    """One request as the client saw it (times in seconds from its start)."""

    ok: bool
    start: float
    ttft: float
    e2e: float
    output_tokens: int
    prompt_tokens: int
    error: str = ""

    @property
    def tpot(self) -> float:
        """Time per output token after the first (NaN with fewer than two tokens)."""
        if not self.ok or self.output_tokens < 2:
            return math.nan
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


@dataclass(frozen=True)
class ServeResult:
    """One concurrency level: throughput, latency percentiles (ms) and failures."""

    concurrency: int
    requests: int  # started
    completed: int
    failures: int
    duration_s: float
    output_tokens: int
    prompt_tokens: int
    output_tok_s: float
    req_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    max_tokens: int
    ignore_eos: bool
    errors: tuple[str, ...] = field(default=())
    request_rate: float | None = None  # requests a second sent at random times; None: closed loop

    def as_dict(self) -> dict[str, Any]:
        """JSON-able (NaN becomes null)."""
        out = asdict(self)
        out["errors"] = list(self.errors)
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in out.items()}

    @classmethod
    def from_records(cls, concurrency: int, started: int, records: Sequence[Record],
                     duration_s: float, max_tokens: int, ignore_eos: bool) -> ServeResult:
        good = [r for r in records if r.ok]
        out_tokens = sum(r.output_tokens for r in good)
        ms = lambda xs, q: percentile(xs, q) * 1000  # noqa: E731
        ttft, tpot, e2e = ([r.ttft for r in good], [r.tpot for r in good],
                           [r.e2e for r in good])
        errors = tuple(dict.fromkeys(r.error for r in records if not r.ok))[:3]
        if started > len(records):
            errors += (f"{started - len(records)} cut at the time limit",)
        d = max(duration_s, 1e-9)
        return cls(concurrency, started, len(good), started - len(good), duration_s, out_tokens,
                   sum(r.prompt_tokens for r in good), out_tokens / d, len(good) / d,
                   ms(ttft, 50), ms(ttft, 99), ms(tpot, 50), ms(tpot, 99), ms(e2e, 50),
                   ms(e2e, 99), max_tokens, ignore_eos, errors)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table with aligned columns (floats rounded, None as '-')."""
    def cell(v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if isinstance(v, float):
            return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    cells = [list(headers)] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"
             for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines)
