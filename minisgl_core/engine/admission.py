"""What a request must pass before a scheduler queues it: a new id, token ids its model knows,
and room in its context and KV pool. A failed check raises RequestRejected and keeps nothing.

The one admission function of every scheduler: the engine's and the synthetic one (which has no
torch: this module imports only the shared types).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

from minisgl_core.rejection import RequestRejected
from minisgl_core.sampling import SamplingParams


@dataclass(frozen=True)
class Limits:
    """What one scheduler can take: its vocabulary, context and KV pool."""

    vocab_size: int
    max_seq_len: int
    page_size: int
    num_pages: int


@dataclass(frozen=True)
class Admission:
    """A request that passed: its prompt as ints, the tokens it may generate, the KV pages that
    prompt and its longest answer need."""

    prompt: list[int]
    max_tokens: int
    pages: int


def admit(request_id: str, prompt_ids: Sequence[int], sampling: SamplingParams, limits: Limits,
          in_use: Container[str] = ()) -> Admission:
    """The request as the scheduler will hold it, or RequestRejected saying why it never can."""
    if request_id in in_use:
        raise RequestRejected(f"request id {request_id!r} is in use", code="duplicate_request_id")
    prompt = [int(t) for t in prompt_ids]
    n = len(prompt)
    vocab = limits.vocab_size
    if n == 0:
        raise RequestRejected("the prompt has no tokens", code="empty_prompt")
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise RequestRejected(f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1})",
                              code="invalid_token_ids")
    bad = [t for t, _ in sampling.logit_bias if t >= vocab]
    if bad:
        raise RequestRejected(f"logit_bias token id {bad[0]} is outside the vocabulary "
                              f"(0..{vocab - 1})", code="invalid_token_ids", param="logit_bias")
    limit = limits.max_seq_len
    if sampling.max_tokens is None:
        if n >= limit:
            raise RequestRejected(f"the prompt has {n} tokens but the context length is {limit} "
                                  "tokens", code="context_length_exceeded")
        max_tokens = limit - n
    else:
        max_tokens = sampling.max_tokens
        if n + max_tokens > limit:
            raise RequestRejected(
                f"this request needs {n + max_tokens} tokens ({n} in the prompt + {max_tokens} "
                f"to generate) but the context length is {limit} tokens",
                code="context_length_exceeded")
    # the last generated token is never fed back, so it needs no KV
    pages = -(-(n + max_tokens - 1) // limits.page_size)
    if pages > limits.num_pages:
        raise RequestRejected(
            f"this request needs {pages} KV pages ({n} prompt + {max_tokens} new tokens, "
            f"{limits.page_size} per page) but the pool has {limits.num_pages}",
            code="kv_cache_exceeded")
    return Admission(prompt, max_tokens, pages)
