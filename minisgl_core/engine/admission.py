"""The checks a request passes before the engine queues it: its token ids, its length against the
context and the KV pool. A failed check raises RequestRejected and keeps nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from minisgl_core.engine.request import RequestRejected
from minisgl_core.sampling import SamplingParams


@dataclass(frozen=True)
class Limits:
    """What one engine can take: its vocabulary, context and KV pool."""

    vocab_size: int
    max_seq_len: int
    page_size: int
    num_pages: int


def admit(prompt_ids: Sequence[int], sampling: SamplingParams,
          limits: Limits) -> tuple[list[int], int]:
    """The prompt as ints and the tokens it may generate, or RequestRejected saying why not."""
    prompt = [int(t) for t in prompt_ids]
    n = len(prompt)
    vocab = limits.vocab_size
    if n == 0:
        raise RequestRejected("empty_prompt", "the prompt has no tokens")
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise RequestRejected("invalid_token_ids", f"token id {bad[0]} is outside the "
                              f"vocabulary (0..{vocab - 1})")
    bad = [t for t, _ in sampling.logit_bias if t >= vocab]
    if bad:
        raise RequestRejected("invalid_token_ids", f"logit_bias token id {bad[0]} is outside "
                              f"the vocabulary (0..{vocab - 1})")
    limit = limits.max_seq_len
    if sampling.max_tokens is None:
        if n >= limit:
            raise RequestRejected("context_length_exceeded", f"the prompt has {n} tokens "
                                  f"but the context length is {limit} tokens")
        max_tokens = limit - n
    else:
        max_tokens = sampling.max_tokens
        if n + max_tokens > limit:
            raise RequestRejected(
                "context_length_exceeded",
                f"this request needs {n + max_tokens} tokens ({n} in the prompt + "
                f"{max_tokens} to generate) but the context length is {limit} tokens")
    # the last generated token is never fed back, so it needs no KV
    pages = -(-(n + max_tokens - 1) // limits.page_size)
    if pages > limits.num_pages:
        raise RequestRejected(
            "kv_cache_exceeded",
            f"this request needs {pages} KV pages ({n} prompt + {max_tokens} new tokens, "
            f"{limits.page_size} per page) but the pool has {limits.num_pages}")
    return prompt, max_tokens
