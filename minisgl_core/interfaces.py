"""Protocols that plugins implement: transports and their channels, roles, frontends.

Plugins need not subclass anything; they satisfy these Protocols, and the contract suites in
``minisgl_core.testing`` check that they behave.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, get_args, runtime_checkable

if TYPE_CHECKING:
    from minisgl_core.wire.schema import (
        DetokenizeCall,
        GenerateRequest,
        PromptLogprobs,
        SamplingParams,
        TextDelta,
        TokenBatch,
        TokenizeCall,
        TokenizedRequest,
        TokenizerReply,
        TokenLogprob,
    )


class ChannelClosed(Exception):
    """The channel was closed: raised by send after close and by a receive woken by close."""


class MessageTooLarge(ValueError):
    """A message exceeds the channel's max_message_bytes; it was never put on the wire."""


class AddressInUse(OSError):
    """A bind to an endpoint that a live channel (in any process) already has bound."""


@runtime_checkable
class Sender(Protocol):
    """The sending end of a push or pub channel. Used by one thread or one event loop."""

    def send(self, data: bytes) -> None:
        """Send one message; blocks while the peer is absent or the buffer is full."""

    async def asend(self, data: bytes) -> None:
        """Send one message without blocking the event loop."""

    def close(self) -> None:
        """Close the channel; idempotent, drops unsent data (linger 0)."""


@runtime_checkable
class Receiver(Protocol):
    """The receiving end of a pull or sub channel. Used by one thread or one event loop."""

    def recv(self, timeout: float | None = None) -> bytes:
        """Wait for one message; TimeoutError after ``timeout`` seconds, ChannelClosed on close."""

    def recv_nowait(self) -> bytes | None:
        """Return one message if one is ready, else None; never blocks."""

    async def arecv(self) -> bytes:
        """Wait for one message without blocking the event loop; ChannelClosed on close."""

    def close(self) -> None:
        """Close the channel; idempotent; wakes a blocked recv/arecv with ChannelClosed."""


@runtime_checkable
class Transport(Protocol):
    """A way to move bytes between threads or processes, selected by name (``--transport``)."""

    name: ClassVar[str]
    multiprocess: ClassVar[bool]  # False for transports that only work inside one process

    def endpoint(self, run_dir: Path, channel: str) -> str:
        """Return the address of ``channel`` for a run whose private directory is ``run_dir``."""

    def push(self, endpoint: str, *, bind: bool = False) -> Sender:
        """Open the sending end of a pipeline (many senders -> one receiver, nothing dropped)."""

    def pull(self, endpoint: str, *, bind: bool = True) -> Receiver:
        """Open the receiving end of a pipeline."""

    def pub(self, endpoint: str, *, bind: bool = True) -> Sender:
        """Open a best-effort fan-out publisher (may drop; never for data that must arrive)."""

    def sub(self, endpoint: str, *, bind: bool = False) -> Receiver:
        """Open a subscriber to a publisher; receives everything published after it joined."""

    def close(self) -> None:
        """Close every channel this transport opened; idempotent."""


TransportFactory = Callable[[Mapping[str, Any]], Transport]
"""What a transport registers: called with its ``[transports.<name>]`` table."""


class Frontend(Protocol):
    """A server that takes client requests and talks to the engine through an EngineClient."""

    async def serve(self) -> None:
        """Serve until ``shutdown`` is called."""

    async def shutdown(self) -> None:
        """Stop accepting requests and make ``serve`` return."""


OptionsTable = Mapping[str, Any]


# ---- roles: what the tokenizer, detokenizer and scheduler process loops call ------------------

RoleKind = Literal["tokenizer", "detokenizer", "scheduler"]
"""The three roles of a service; each runs in its own process, one implementation per kind."""
ROLE_KINDS: tuple[RoleKind, ...] = get_args(RoleKind)


@runtime_checkable
class Tokenizer(Protocol):
    """The tokenizer role (``--tokenizer NAME``), driven by ``service.text_loops.run_tokenizer``."""

    def tokenize(self, request: GenerateRequest) -> TokenizedRequest:
        """One request in, one out; never raises: a bad request comes back with ``error`` set."""

    def close(self) -> None:
        """Release what the role holds; idempotent."""


@runtime_checkable
class TokenizerCalls(Protocol):
    """What a tokenizer role may also answer: ``EngineClient.tokenize`` / ``detokenize`` (the
    frontends' /tokenize and /detokenize), so no frontend loads a tokenizer of its own.

    Optional: a role without these methods answers each call with an error. Each raises
    RequestRejected for a call it cannot serve (the loop sends it back as the reply's error).
    """

    def tokenize_call(self, call: TokenizeCall) -> TokenizerReply:
        """The prompt ids ``call.request`` would send (and their strings when asked)."""

    def detokenize_call(self, call: DetokenizeCall) -> TokenizerReply:
        """``call.token_ids`` as text, special tokens kept."""


@runtime_checkable
class Detokenizer(Protocol):
    """The detokenizer role (``--detokenizer NAME``), driven by ``run_detokenizer``."""

    def process(self, batch: TokenBatch) -> Mapping[str, Sequence[TextDelta]]:
        """One scheduler step's deltas as text, grouped by the frontend (owner) they go to.

        A request's first TokenDelta carries its ``DetokenizeInfo`` (owner, stop strings);
        every request gets exactly one TextDelta with a ``finish_reason``, its last.
        """

    def active_count(self) -> int:
        """Requests seen and not finished yet (the ``detokenizer_requests_active`` gauge)."""

    def close(self) -> None:
        """Release what the role holds; idempotent."""


@runtime_checkable
class StepResult(Protocol):
    """What one scheduler step produced for one request (``engine.request.StepOutput``).

    It may also have ``error``: a RequestRejected (no tokens, its last result) for a request
    refused after it was queued, as the engine does when a grammar fails to compile.
    """

    @property
    def request_id(self) -> str: ...
    @property
    def token_ids(self) -> Sequence[int]: ...  # new this step
    @property
    def finish_reason(self) -> str | None: ...  # "stop" or "length", set once, last
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def logprobs(self) -> Sequence[TokenLogprob]: ...  # one per token id when asked
    @property
    def prompt_logprobs(self) -> PromptLogprobs | None: ...  # on the first result, when asked


@runtime_checkable
class SchedulerStats(Protocol):
    """A scheduler's load and KV page accounting, as /metrics shows it."""

    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def pages_total(self) -> int: ...
    @property
    def pages_free(self) -> int: ...  # allocatable now; equals pages_total when idle
    @property
    def pages_cached(self) -> int: ...
    @property
    def cache_hit_tokens(self) -> int: ...


@runtime_checkable
class Scheduler(Protocol):
    """The scheduler role (``--scheduler NAME``), driven by ``service.scheduler_loop``.

    ``add_request`` raises ``RequestRejected`` for a request that can never run (the client
    gets its message, code and param); ``engine.admission.admit`` makes the engine's checks on
    any ``Limits``. Any other exception fails that request as a server error.
    """

    def info(self) -> Mapping[str, str]:
        """Facts the frontends need, sent with Ready: ``model_name``, ``max_seq_len``."""

    def add_request(self, request_id: str, prompt_ids: Sequence[int],
                    sampling: SamplingParams) -> None:
        """Queue a request, or raise RequestRejected keeping nothing of it."""

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its pages; False if unknown or already finished."""

    def has_work(self) -> bool:
        """True while any request is waiting or running."""

    def step(self) -> Sequence[StepResult]:
        """Run one step: new tokens of the requests that got some; terminal ones included."""

    def stats(self) -> SchedulerStats:
        """Current load and page accounting."""

    def follow(self) -> None:
        """Tensor-parallel ranks > 0 only: run rank 0's steps until it stops."""

    def close(self) -> None:
        """Stop what the role started (tensor-parallel followers); idempotent."""

