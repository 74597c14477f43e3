"""Per-request engine state and the per-step output record."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from minisgl_core.rejection import RequestRejected
from minisgl_core.sampling import PromptLogprobs, SamplingParams, TokenLogprob

StopReason = Literal["stop", "length"]


@dataclass(frozen=True)
class StepOutput:
    """What one step produced for one request; ``finish_reason`` is set exactly once, last."""

    request_id: str
    token_ids: tuple[int, ...]  # new this step
    finish_reason: StopReason | Literal["error"] | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens the prefix cache supplied when it was admitted
    logprobs: tuple[TokenLogprob, ...] = ()  # for each of token_ids, when the request asked
    prompt_logprobs: PromptLogprobs | None = None  # on the first output, when the request asked
    error: RequestRejected | None = None  # set (with no tokens) when the request was refused late


class State(enum.Enum):
    """Where a request is: waiting holds no pages; running holds pages; finished holds none."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    """A request's tokens, KV pages and sampling state inside the engine."""

    request_id: str
    prompt_ids: list[int]
    sampling: SamplingParams
    max_tokens: int  # resolved: never beyond the context limit
    output_ids: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    num_cached: int = 0  # tokens whose K/V are in the cache
    state: State = State.WAITING
    finish_reason: StopReason | None = None
    generator: torch.Generator | None = None  # per-request RNG when sampling.seed is set
    counts: torch.Tensor | None = None  # [V] output token counts (presence/frequency penalty)
    seen: torch.Tensor | None = None  # [V] bool: in prompt or output (repetition penalty)
    bias: tuple[torch.Tensor, torch.Tensor] | None = None  # logit_bias: ids [B], values [B]
    banned: torch.Tensor | None = None  # [S] stop token ids masked until min_tokens exist
    stop_window: int = 0  # output tokens to decode when checking stop strings (0: none)
    admitted: bool = False  # admitted once already (a preempted request is admitted again)
    cached_tokens: int = 0  # prefix-cache hit at its first admission (reported in outputs)
    cache_node: Any = None  # radix_cache.Node it locks while running (None: holds no lock)
    num_shared_pages: int = 0  # pages[:num_shared_pages] belong to the prefix cache's tree
    prompt_lp: Any = None  # prompt_logprobs.PromptLogprobState when sampling.prompt_logprobs
    grammar: Any = None  # grammar.GrammarState of a constrained request
    grammar_future: Any = None  # its compiling grammar while the request waits for it
    drafts: tuple[int, ...] = ()  # this step's speculative draft tokens (speculative.py)
    spec_pause: int = 0  # steps left before it drafts again (after a wholly rejected draft)
    spec_backoff: int = 0  # the pause the next wholly rejected draft sets (doubles, capped)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.prompt_ids) + len(self.output_ids)

    def token_slice(self, start: int, stop: int) -> list[int]:
        """Tokens at positions ``start:stop`` of prompt + output."""
        n = len(self.prompt_ids)
        if stop <= n:
            return self.prompt_ids[start:stop]
        if start >= n:
            return self.output_ids[start - n:stop - n]
        return self.prompt_ids[start:] + self.output_ids[:stop - n]
