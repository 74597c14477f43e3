"""Prompt log-probabilities: the LM head over the prompt positions of the requests that ask.

Position ``p`` of a prefill chunk predicts prompt token ``p + 1``, so the rows of a chunk give
the entries of the tokens after it. A request keeps what it has collected across chunks (and
across a preemption, whose recompute collects nothing twice) and hands the whole list over with
its first sampled token. The prefix cache must not skip positions whose entries are still
missing, so such a request is admitted without a cache hit (see ``needs_positions``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from minisgl_core.engine.sampler import token_logprobs
from minisgl_core.sampling import PromptLogprobs, TokenLogprob

ROWS_PER_SLAB = 256  # LM-head rows at a time: [256, V] fp32 logits are ~50 MB at V = 49k


@dataclass(eq=False)
class PromptLogprobState:
    """One request's prompt entries collected so far (entry i belongs to token i + 1)."""

    top: int  # alternatives per entry
    entries: list[TokenLogprob] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    sent: bool = False

    @property
    def next_token(self) -> int:
        """The prompt index of the next token whose entry is missing (starts at 1)."""
        return len(self.entries) + 1


def needs_positions(state: PromptLogprobState | None, prompt_len: int) -> bool:
    """True while some prompt token still lacks its entry (the prefix cache must be bypassed)."""
    return state is not None and state.next_token < prompt_len


def take(state: PromptLogprobState | None, prompt_ids: Sequence[int]) -> PromptLogprobs | None:
    """The collected entries, once (on the request's first output); None after or if unasked."""
    if state is None or state.sent:
        return None
    state.sent = True
    return PromptLogprobs(tuple(prompt_ids), tuple(state.entries), tuple(state.ranks))


@dataclass(frozen=True)
class Chunk:
    """A prefill chunk of a request asking for prompt logprobs: positions ``start:start+n``
    of its tokens sit at rows ``row:row+n`` of the step's hidden states."""

    state: PromptLogprobState
    prompt_ids: Sequence[int]
    start: int
    row: int
    n: int


def collect(chunks: Sequence[Chunk], hidden: torch.Tensor,
            logits_of: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Append each chunk's missing entries to its state; ``hidden [T, H]`` is the step's."""
    rows: list[int] = []
    targets: list[int] = []
    owners: list[PromptLogprobState] = []
    for c in chunks:
        # position p predicts token p + 1; the last prompt position predicts the first output
        first = max(c.start, c.state.next_token - 1)
        last = min(c.start + c.n, len(c.prompt_ids) - 1)
        for p in range(first, last):
            rows.append(c.row + p - c.start)
            targets.append(c.prompt_ids[p + 1])
            owners.append(c.state)
    for lo in range(0, len(rows), ROWS_PER_SLAB):
        index = torch.tensor(rows[lo:lo + ROWS_PER_SLAB], device=hidden.device)
        dist = torch.log_softmax(logits_of(hidden.index_select(0, index)).float(), -1)  # [R, V]
        tokens = targets[lo:lo + ROWS_PER_SLAB]
        states = owners[lo:lo + ROWS_PER_SLAB]
        found = token_logprobs(dist, tokens, [s.top for s in states])
        chosen = dist.gather(1, torch.tensor(tokens, device=dist.device).unsqueeze(1))  # [R, 1]
        ranks = ((dist > chosen).sum(-1) + 1).tolist()
        for state, entry, rank in zip(states, found, ranks, strict=True):
            state.entries.append(entry)
            state.ranks.append(int(rank))
