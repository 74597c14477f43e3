"""The wire schema: every message the processes of a minisgl service pass to each other.

Messages are grouped by the process that receives them. Each inbound channel has a closed,
tagged union (``TokenizerInbound``, ``SchedulerInbound`` ...) that ``codec`` decodes against, so a
receiving loop can ``match`` on the type and never sees a message it does not expect.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from minisgl_core.rejection import ErrorInfo as ErrorInfo
from minisgl_core.rejection import ErrorType as ErrorType
from minisgl_core.sampling import MAX_LOGPROBS as MAX_LOGPROBS
from minisgl_core.sampling import PromptLogprobs as PromptLogprobs
from minisgl_core.sampling import SamplingParams as SamplingParams
from minisgl_core.sampling import StructuredKind as StructuredKind
from minisgl_core.sampling import StructuredOutput as StructuredOutput
from minisgl_core.sampling import TokenLogprob as TokenLogprob

FinishReason = Literal["stop", "length", "abort", "error"]


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


class TokenizeCall(msgspec.Struct, frozen=True, tag="tokenize"):
    """Show the prompt ids a request would send, without generating (``EngineClient.tokenize``).

    ``request`` carries the same chat-template inputs as a generation (prompt or messages,
    tools, and whatever a GenerateRequest gains), so the ids are the ones it would send. The
    tokenizer answers ``owner`` with a TokenizerReply of the same ``call_id``.
    """

    call_id: str
    owner: str
    request: GenerateRequest
    add_special_tokens: bool | None = None  # None: True for a prompt, False for messages
    add_generation_prompt: bool = True  # messages only: end with the assistant's turn opened
    token_strs: bool = False  # also each id as its token string


class DetokenizeCall(msgspec.Struct, frozen=True, tag="detokenize"):
    """Decode token ids to text, special tokens kept (``EngineClient.detokenize``)."""

    call_id: str
    owner: str
    token_ids: tuple[int, ...]


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
    tool_parser: str | None = None  # a chat with tools: the model family's tool-call format


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
    stop_string: str | None = None  # on the final delta: the stop string that ended the text
    tool_parser: str | None = None  # a chat with tools: the format its calls are written in


class TextBatch(msgspec.Struct, frozen=True, tag="text_batch"):
    """TextDeltas for one frontend, batched per detokenizer step."""

    deltas: tuple[TextDelta, ...]


class TokenizerReply(msgspec.Struct, frozen=True, tag="tokenizer_reply"):
    """The tokenizer's answer to a TokenizeCall (ids, strings) or a DetokenizeCall (text);
    ``error`` set means it could not answer (a rejection, or a role that does not answer)."""

    call_id: str
    token_ids: tuple[int, ...] = ()
    token_strs: tuple[str, ...] | None = None
    text: str = ""
    error: ErrorInfo | None = None


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
    dp_rank: int | None = None  # the scheduler replica it comes from, when there are several


# Stats: under --dp, each scheduler replica's load, for the tokenizer's dispatch
TokenizerInbound = GenerateRequest | TokenizeCall | DetokenizeCall | Abort | Shutdown | Stats
SchedulerInbound = TokenizedRequest | Abort | Shutdown
DetokenizerInbound = TokenBatch | Shutdown
FrontendInbound = TextBatch | TokenizerReply | Shutdown
ControlInbound = Ready | Fatal | Stats

Message = (GenerateRequest | TokenizeCall | DetokenizeCall | Abort | Shutdown | TokenizedRequest
           | TokenBatch | TextBatch | TokenizerReply | Ready | Fatal | Stats)
