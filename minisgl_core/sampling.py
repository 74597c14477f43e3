"""Sampling parameters and per-token log-probabilities: what a request asks of the engine and
what the engine reports per token. Shared by the wire schema and the engine, which imports only
this module of the service's types."""

from __future__ import annotations

import math
from typing import Literal

import msgspec

MAX_LOGPROBS = 20  # top alternatives per token, as OpenAI's top_logprobs
_NAN_SAFE_FIELDS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                    "repetition_penalty")


StructuredKind = Literal["json", "json_schema", "regex", "choice", "grammar"]


class StructuredOutput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A grammar the output must follow (structured outputs, forced tool calls).

    ``spec`` by ``kind``: ``json_schema`` the schema as JSON text; ``json`` unused (any JSON
    object); ``regex`` a regular expression; ``choice`` a JSON list of the allowed strings;
    ``grammar`` an EBNF grammar (xgrammar's dialect, rule ``root``).
    """

    kind: StructuredKind
    spec: str = ""
    # token ids the output produces before the grammar applies (the end of a reasoning block,
    # set by the tokenizer process under --reasoning-parser); empty: from the first token
    wait_for: tuple[int, ...] = ()


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to sample one request's tokens and when to stop.

    ``max_tokens=None`` means "up to the context limit". ``top_k=0`` disables top-k. Until
    ``min_tokens`` tokens exist, EOS and ``stop_token_ids`` cannot be sampled (as in vLLM, stop
    strings still stop). ``logit_bias`` holds ``(token id, bias)`` pairs added to the logits
    before sampling (-100 all but bans a token, 100 all but forces it).
    """

    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    min_tokens: int = 0
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: int | None = None  # None: none; k: each token's logprob and the top k at its step
    prompt_logprobs: int | None = None  # None: none; k: each prompt token's and the top k
    structured: StructuredOutput | None = None  # constrain the output to this grammar

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """Return a one-line description of the first invalid field, or None when all are valid."""
        for name in _NAN_SAFE_FIELDS:
            if not math.isfinite(getattr(self, name)):
                return f"{name} must be a finite number"
        if self.max_tokens is not None and self.max_tokens < 1:
            return f"max_tokens must be at least 1, got {self.max_tokens}"
        if self.temperature < 0:
            return f"temperature must be >= 0, got {self.temperature}"
        if not 0 < self.top_p <= 1:
            return f"top_p must be in (0, 1], got {self.top_p}"
        if self.top_k < 0:
            return f"top_k must be >= 0 (0 disables it), got {self.top_k}"
        if not 0 <= self.min_p <= 1:
            return f"min_p must be in [0, 1], got {self.min_p}"
        if not -2 <= self.presence_penalty <= 2:
            return f"presence_penalty must be in [-2, 2], got {self.presence_penalty}"
        if not -2 <= self.frequency_penalty <= 2:
            return f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}"
        if not 0 < self.repetition_penalty <= 2:
            return f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}"
        if any(not s for s in self.stop):
            return "stop strings must not be empty"
        if any(t < 0 for t in self.stop_token_ids):
            return "stop_token_ids must be non-negative"
        if self.min_tokens < 0:
            return f"min_tokens must be >= 0, got {self.min_tokens}"
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            return f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})"
        if any(t < 0 for t, _ in self.logit_bias):
            return "logit_bias token ids must be non-negative"
        if not all(math.isfinite(b) and -100 <= b <= 100 for _, b in self.logit_bias):
            return "logit_bias values must be numbers in [-100, 100]"
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            return f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}"
        if self.prompt_logprobs is not None and not 0 <= self.prompt_logprobs <= MAX_LOGPROBS:
            return f"prompt_logprobs must be in [0, {MAX_LOGPROBS}], got {self.prompt_logprobs}"
        return None

    @property
    def greedy(self) -> bool:
        """True when sampling reduces to argmax."""
        return self.temperature == 0 or self.top_k == 1


class TokenLogprob(msgspec.Struct, frozen=True, array_like=True):
    """One generated token's log-probability under the model, and the top alternatives then."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), most likely first


class PromptLogprobs(msgspec.Struct, frozen=True):
    """A prompt's log-probabilities: ``entries[i]`` is token ``i + 1``'s (the first has none)."""

    token_ids: tuple[int, ...]  # the whole prompt
    entries: tuple[TokenLogprob, ...]  # len(token_ids) - 1
    ranks: tuple[int, ...]  # entries[i]'s token's rank in the vocabulary (1: the most likely)
