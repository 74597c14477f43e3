"""When a request stops: its grammar is complete, EOS or a stop token id, a stop string in the
decoded tail, or max_tokens reached."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minisgl_core.engine.request import Request, StopReason


def stop_window(stop: Sequence[str]) -> int:
    """Output tokens to decode when looking for ``stop`` strings (0: none): a string of c
    characters spans at most 4c one-byte tokens, plus one partial."""
    return 4 * max(len(s) for s in stop) + 2 if stop else 0


def finish_reason(req: Request, token: int, eos_token_ids: frozenset[int],
                  tokenizer: Any) -> StopReason | None:
    """Why ``req`` ends after taking ``token`` (already appended), or None to go on."""
    s = req.sampling
    if req.grammar is not None and req.grammar.finished:
        return "stop"  # the grammar accepted EOS: the output is complete
    if (not s.ignore_eos and token in eos_token_ids) or token in s.stop_token_ids:
        return "stop"
    if req.stop_window:
        tail = tokenizer.decode(req.output_ids[-req.stop_window:],
                                skip_special_tokens=s.skip_special_tokens)
        if any(stop in tail for stop in s.stop):
            return "stop"
    if len(req.output_ids) >= req.max_tokens:
        return "length"
    return None
