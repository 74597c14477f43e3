"""EngineClient: the one object a frontend talks to (submit, stream, abort, tokenize, health,
metrics, the plugins served)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from minisgl_core.wire.schema import GenerateRequest, TextDelta, TokenizerReply


class EngineUnavailable(Exception):
    """The engine is not ready, or one of its processes died: answer 503 / UNAVAILABLE."""


class EngineOverloaded(Exception):
    """The waiting queue is over its limit: answer 429 / RESOURCE_EXHAUSTED."""


class EngineClient(Protocol):
    """What a frontend needs from the engine; it never touches sockets itself."""

    @property
    def model_name(self) -> str:
        """The served model's name, as listed by /v1/models."""

    @property
    def max_context(self) -> int:
        """The longest prompt + completion, in tokens, the engine accepts."""

    @property
    def frontend_id(self) -> str:
        """The owner id to put in GenerateRequest.owner so that replies come back here."""

    def healthy(self) -> bool:
        """True while every engine process is up and ready."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        """Submit ``request`` and yield its TextDeltas; the last one carries finish_reason.

        The deltas carry the engine's own request id: ids are made unique per run on the way in,
        so a client-chosen id that repeats cannot collide with another request.

        Raises EngineUnavailable / EngineOverloaded before yielding anything when the request
        cannot be taken. Closing the iterator early (client disconnect, cancellation) aborts the
        request in the scheduler.
        """

    async def abort(self, request_id: str) -> None:
        """Abort a request; idempotent."""

    async def tokenize(self, request: GenerateRequest, *, add_special_tokens: bool | None = None,
                       add_generation_prompt: bool = True, token_strs: bool = False
                       ) -> TokenizerReply:
        """The prompt ids ``request`` would send to the engine, from the tokenizer role (its
        tokenizer and chat template; nothing is generated).

        ``add_special_tokens`` (None: True for a prompt, False for messages, whose template
        writes its own), ``add_generation_prompt`` (messages: open the assistant's turn) and
        ``token_strs`` (also each id's token string) are /tokenize's options. The reply's
        ``error`` says why not (a rejection: ``invalid_request_error``); EngineUnavailable when
        the engine is down.
        """

    async def detokenize(self, token_ids: Sequence[int]) -> TokenizerReply:
        """``token_ids`` as text (the reply's ``text``; special tokens kept), from the
        tokenizer role; ``error`` and EngineUnavailable as ``tokenize``."""

    def metrics(self) -> dict[str, float]:
        """The latest gauges and counters from the workers (for /metrics)."""

    def plugins(self) -> list[dict[str, Any]]:
        """The plugins the service runs with, as ``minisgl plugins --json`` lists them (name,
        dist, version, provides, hooks, status)."""
