"""The flat token layout of one step: plain decode rows, speculating chunks, prefill chunks.

One forward takes every scheduled token in one row order: first one row per plain decoding
request, then per speculating request its last token and its drafts, then the prefill chunks.
A speculating request's ``k + 1`` positions are decode rows too, each with its own context
length (its position + 1): the step stores every row's key and value before any row attends,
so position i sees the drafts before it, and a step with drafts stays a decode-only step (the
paged decode attention, the compiled graph) instead of one with an extend chunk. ``rows`` are
the rows whose logits sample a plain token (decodes, and the last row of a prefill that
completes its prompt); ``spec_rows`` are every row of the speculating requests, in order, which
``Speculator.verify_all`` reads.

Short prefill chunks are laid out the same way, as decode rows of their own positions (after the
speculating rows), when they ask no prompt logprobs and their rows read at most ``fold_keys``
keys in all: a step that admits one new request beside the running ones then stays a decode-only
step too, served by the compiled graph instead of the eager forward (with requests arriving one
at a time beside 32 running ones, half the steps admit one). A long chunk keeps the extend
path: the decode attention would read its context once per row.
"""

from __future__ import annotations

from dataclasses import dataclass

from minisgl_core.engine import prompt_logprobs
from minisgl_core.engine.batching import ScheduledBatch
from minisgl_core.engine.request import Request

# the keys and values the folded prefill rows of one step may read in all: about 4 ms of decode
# attention at 25 GB/s (on the default model, 4,369 keys of 23,040 bytes across its layers; a
# (row, KV head) pair took ~10 ns a key), against the 10-16 ms an eager step took beyond the
# compiled one at 32 rows there; a model with more KV bytes per token folds fewer keys
FOLD_BYTES = 96 << 20


def fold_keys(kv_bytes_per_token: int) -> int:
    """The keys a step's folded prefill rows may read, with ``kv_bytes_per_token`` of K and V
    per token across the layers (this rank's share)."""
    return FOLD_BYTES // kv_bytes_per_token


Pages = tuple[list[int], int]  # a decode row: the request's pages, its length after this token
Chunk = tuple[list[int], int, int]  # an extend chunk: pages, tokens cached before, chunk length


@dataclass(frozen=True)
class StepLayout:
    """Inputs of one forward and where each request's logits are."""

    ids: list[int]  # [T] token ids in row order
    decode: list[Pages]  # one per plain decode row, then one per speculating position
    prefill: list[Chunk]  # the prefill chunks
    rows: list[int]  # rows sampled for ``to_sample``, in its order
    to_sample: list[Request]
    spec_rows: list[int]  # the k + 1 rows of each speculating request, in its order
    chunks: list[prompt_logprobs.Chunk]  # prefill chunks whose prompt logprobs are asked


def _last(r: Request) -> int:
    return r.output_ids[-1] if r.output_ids else r.prompt_ids[-1]


def _fold(prefill: list[tuple[Request, int]], fold_keys: int,
          ) -> tuple[list[tuple[Request, int]], list[tuple[Request, int]]]:
    """The chunks laid out as decode rows (in order, while the keys their rows read, those of
    positions ``num_cached + 1 .. num_cached + n`` each, fit in ``fold_keys``), and the rest."""
    folded, extend = [], []
    for r, n in prefill:
        keys = n * (2 * r.num_cached + n + 1) // 2
        if r.prompt_lp is None and keys <= fold_keys:
            folded.append((r, n))
            fold_keys -= keys
        else:
            extend.append((r, n))
    return folded, extend


def layout(batch: ScheduledBatch, spec: list[Request], fold_keys: int = 0) -> StepLayout:
    """The layout of ``batch`` (plain decodes in ``batch.decode``) with ``spec`` speculating,
    and prefill chunks reading at most ``fold_keys`` keys in all as decode rows."""
    ids = [_last(r) for r in batch.decode]
    rows = list(range(len(ids)))
    to_sample = list(batch.decode)
    spec_rows: list[int] = []
    for r in spec:
        spec_rows.extend(range(len(ids), len(ids) + 1 + len(r.drafts)))
        ids.append(_last(r))
        ids.extend(r.drafts)
    folded, extend = _fold(batch.prefill, fold_keys)
    chunks: list[prompt_logprobs.Chunk] = []
    for r, n in folded + extend:  # the folded rows follow the speculating ones
        if r.prompt_lp is not None:
            chunks.append(prompt_logprobs.Chunk(r.prompt_lp, r.prompt_ids, r.num_cached,
                                                len(ids), n))
        ids.extend(r.token_slice(r.num_cached, r.num_cached + n))
        if r.num_cached + n == r.num_tokens:
            rows.append(len(ids) - 1)
            to_sample.append(r)
    decode = [(r.pages, r.num_cached + 1) for r in batch.decode]
    decode += [(r.pages, r.num_cached + 1 + i) for r in spec for i in range(1 + len(r.drafts))]
    decode += [(r.pages, r.num_cached + 1 + i) for r, n in folded for i in range(n)]
    prefill = [(r.pages, r.num_cached, n) for r, n in extend]
    return StepLayout(ids, decode, prefill, rows, to_sample, spec_rows, chunks)
