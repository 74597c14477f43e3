"""The wire schema: every message the processes of a minisgl service pass to each other.

Messages are grouped by the process that receives them. Each inbound channel has a closed,
tagged union (``TokenizerInbound``, ``SchedulerInbound`` ...) that ``codec`` decodes against, so a
receiving loop can ``match`` on the type and never sees a message it does not expect.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from minisgl_core.sampling import MAX_LOGPROBS as MAX_LOGPROBS
from minisgl_core.sampling import PromptLogprobs as PromptLogprobs
from minisgl_core.sampling import SamplingParams as SamplingParams
from minisgl_core.sampling import StructuredKind as StructuredKind
from minisgl_core.sampling import StructuredOutput as StructuredOutput
from minisgl_core.sampling import TokenLogprob as TokenLogprob

FinishReason = Literal["stop", "length", "abort", "error"]
ErrorType = Literal["invalid_request_error", "server_error", "overloaded_error"]



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
    # extra variables of the chat template (``{"enable_thinking": false}``) as a JSON object
    chat_template_kwargs: str | None = None


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
    reasoning_parser: str | None = None  # split the text into reasoning and content (chat)
    reasoning_open: bool = False  # the output starts inside a reasoning block


class TokenizedRequest(msgspec.Struct, frozen=True, tag="tokenized"):
    """A request ready for the engine. ``error`` set means: reject it with this error at once."""

    request_id: str
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams
    detokenize: DetokenizeInfo
    arrival_time: float = 0.0
    error: ErrorInfo | None = None


# ---- to the detokenizer process ----------------------------------------------------------------


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
    """New text of one request; exactly one delta per request carries a finish_reason.

    Under a reasoning parser ``text`` is the answer's content and ``reasoning`` its reasoning.
    """

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
    reasoning: str = ""  # new reasoning text (a ``<think>`` block), under a reasoning parser


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
