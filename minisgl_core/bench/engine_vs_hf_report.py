"""The figures of ``minisgl bench offline`` (engine_vs_hf.py): one ``Result`` per batch size
and engine, each engine's name in the table, and the markdown table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

COMPILED = "+compiled"


@dataclass(frozen=True)
class Result:
    """One batch size's figures."""

    batch: int
    max_tokens: int
    engine_tok_s: float
    hf_tok_s: float
    ratio: float
    engine_s: float
    hf_s: float
    engine_peak_rss_mib: float
    system: str = "fp32"  # the engine's weights: fp32 or int8
    ceiling_tok_s: float = 0.0  # the host's roofline for this model and batch (0: not measured)
    ceiling_pct: float = 0.0  # engine_tok_s as a percentage of it
    bound: str = ""  # "bandwidth" or "compute": which side of the roofline holds


def label_of(dtype: str, quantization: str | None, compiled: bool = False) -> str:
    """A system's name in the table: ``fp32``, ``bf16``, ``auto``, ``int8``, ``bf16-int8``, and
    ``+compiled`` after it when its decode step is compiled."""
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)
    name = short if quantization is None else \
        quantization if dtype == "float32" else f"{short}-{quantization}"
    return f"{name}{COMPILED}" if compiled else name


def markdown(results: Sequence[Result]) -> str:
    """The results as a markdown table (int8 rows also as a multiple of fp32's)."""
    fp32 = {r.batch: r.engine_tok_s for r in results if r.system == "fp32"}
    by_system = {(r.system, r.batch): r.engine_tok_s for r in results}
    compiled = any(r.system.endswith(COMPILED) for r in results)
    lines = ["| batch | engine | engine tok/s | % of host ceiling | transformers tok/s | ratio "
             "| vs fp32 engine |" + (" compiled vs eager |" if compiled else ""),
             "| ---: | :--- | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if compiled else "")]
    for r in results:
        pct = f"{r.ceiling_pct:.0f}% of {r.ceiling_tok_s:.0f} ({r.bound})" if r.bound else "-"
        vs = f"{r.engine_tok_s / fp32[r.batch]:.2f}x" if r.batch in fp32 else "-"
        line = (f"| {r.batch} | {r.system} | {r.engine_tok_s:.1f} | {pct} | "
                f"{r.hf_tok_s:.1f} | {r.ratio:.2f}x | {vs} |")
        if compiled:
            eager = by_system.get((r.system.removesuffix(COMPILED), r.batch))
            gain = f"{r.engine_tok_s / eager:.2f}x" if r.system.endswith(COMPILED) and eager \
                else "-"
            line += f" {gain} |"
        lines.append(line)
    if results:
        lines.append(f"\nengine peak RSS: {results[0].engine_peak_rss_mib:.0f} MiB"
                     + (" (all engines of the run together)" if len(fp32) < len(results)
                        else ""))
    return "\n".join(lines)
