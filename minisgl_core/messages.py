"""The wire schema: every message the processes of a minisgl service pass to each other.

Messages are grouped by the process that receives them. Each inbound channel has a closed,
tagged union (``TokenizerInbound``, ``SchedulerInbound`` ...) that ``codec`` decodes against, so a
receiving loop can ``match`` on the type and never sees a message it does not expect.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

FinishReason = Literal["stop", "length", "abort", "error"]
ErrorType = Literal["invalid_request_error", "server_error", "overloaded_error"]

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


class ToolCall(msgspec.Struct, frozen=True):
    """A function call an assistant turn made; ``arguments`` is JSON text, as OpenAI sends it."""

    id: str
    name: str
    arguments: str


class ChatMessage(msgspec.Struct, frozen=True):
    """One turn of a chat conversation (a ``tool`` turn answers the call ``tool_call_id``)."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


class ErrorInfo(msgspec.Struct, frozen=True):
    """Why a request failed; mirrors the OpenAI error envelope's fields."""

    message: str
    type: ErrorType = "invalid_request_error"
    code: str | None = None
    param: str | None = None


# ---- to the tokenizer process ------------------------------------------------------------------


class GenerateRequest(msgspec.Struct, frozen=True, tag="generate"):
    """A new request from a frontend: exactly one of prompt, messages or token_ids is set."""

    request_id: str
    owner: str  # the id of the frontend that receives this request's output
    sampling: SamplingParams
    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    arrival_time: float = 0.0
    tools: str | None = None  # the OpenAI ``tools`` list as JSON text, for the chat template


class Abort(msgspec.Struct, frozen=True, tag="abort"):
    """Stop a request and free everything it holds; idempotent, travels the request's own path."""

    request_id: str
    reason: str = "client disconnected"


class Shutdown(msgspec.Struct, frozen=True, tag="shutdown"):
    """Ask the receiving process to leave its loop and exit cleanly."""


# ---- to the scheduler process ------------------------------------------------------------------


class DetokenizeInfo(msgspec.Struct, frozen=True):
    """What the detokenizer needs to know about a request; rides on its first TokenDelta."""

    owner: str
    prompt_tail_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    skip_special_tokens: bool = True


class TokenizedRequest(msgspec.Struct, frozen=True, tag="tokenized"):
    """A request ready for the engine. ``error`` set means: reject it with this error at once."""

    request_id: str
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    detokenize: DetokenizeInfo
    arrival_time: float = 0.0
    error: ErrorInfo | None = None


# ---- to the detokenizer process ----------------------------------------------------------------


class TokenLogprob(msgspec.Struct, frozen=True, array_like=True):
    """One generated token's log-probability under the model, and the top alternatives then."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob), most likely first


class PromptLogprobs(msgspec.Struct, frozen=True):
    """A prompt's log-probabilities: ``entries[i]`` is token ``i + 1``'s (the first has none)."""

    token_ids: tuple[int, ...]  # the whole prompt
    entries: tuple[TokenLogprob, ...]  # len(token_ids) - 1
    ranks: tuple[int, ...]  # entries[i]'s token's rank in the vocabulary (1: the most likely)


class TokenDelta(msgspec.Struct, frozen=True):
    """New token ids of one request from one engine step; ``finish_reason`` set marks the end."""

    request_id: str
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    detokenize: DetokenizeInfo | None = None  # present on a request's first delta only
    error: ErrorInfo | None = None
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token id, when the request asked
    prompt_logprobs: PromptLogprobs | None = None  # on the first delta, when the request asked


class TokenBatch(msgspec.Struct, frozen=True, tag="token_batch"):
    """Every request's TokenDelta from one scheduler step: one message per step, not per token."""

    deltas: tuple[TokenDelta, ...]


# ---- to a frontend -----------------------------------------------------------------------------


class TextLogprob(msgspec.Struct, frozen=True, array_like=True):
    """A TokenLogprob with the token and its alternatives also as text (each decoded alone)."""

    token_id: int
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


class TextPromptLogprobs(msgspec.Struct, frozen=True):
    """PromptLogprobs with text: the prompt decoded, and each token and alternative alone."""

    text: str  # the prompt's ids decoded together, special tokens kept
    logprobs: PromptLogprobs
    tokens: tuple[str, ...]  # logprobs.token_ids[i] decoded alone
    top_tokens: tuple[tuple[str, ...], ...]  # logprobs.entries[i].top's ids, decoded alone


class TextDelta(msgspec.Struct, frozen=True):
    """New text of one request; exactly one delta per request carries a finish_reason."""

    request_id: str
    text: str = ""
    token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    error: ErrorInfo | None = None
    logprobs: tuple[TextLogprob, ...] = ()  # one per token id, when the request asked
    prompt_logprobs: TextPromptLogprobs | None = None  # on the first delta, when asked


class TextBatch(msgspec.Struct, frozen=True, tag="text_batch"):
    """TextDeltas for one frontend, batched per detokenizer step."""

    deltas: tuple[TextDelta, ...]


# ---- to the launcher (control channel) ---------------------------------------------------------


class Ready(msgspec.Struct, frozen=True, tag="ready"):
    """A worker finished its setup; ``info`` carries facts the frontends need (context...)."""

    process: str
    pid: int
    info: dict[str, str] = {}


class Fatal(msgspec.Struct, frozen=True, tag="fatal"):
    """A worker hit an error it cannot survive; it exits right after sending this."""

    process: str
    pid: int
    error: str

    def describe(self) -> str:
        """One line for logs and launch errors, naming the process."""
        return f"minisgl::{self.process} (pid {self.pid}) failed: {self.error}"


class Stats(msgspec.Struct, frozen=True, tag="stats"):
    """Counters and gauges a worker reports for /metrics (name -> value)."""

    process: str
    gauges: dict[str, float] = {}
    counters: dict[str, float] = {}
    # finished request latencies for histograms: time to first token and per output token
    ttft_seconds: tuple[float, ...] = ()
    tpot_seconds: tuple[float, ...] = ()


TokenizerInbound = GenerateRequest | Abort | Shutdown
SchedulerInbound = TokenizedRequest | Abort | Shutdown
DetokenizerInbound = TokenBatch | Shutdown
FrontendInbound = TextBatch | Shutdown
ControlInbound = Ready | Fatal | Stats

Message = (GenerateRequest | Abort | Shutdown | TokenizedRequest | TokenBatch | TextBatch | Ready
           | Fatal | Stats)
