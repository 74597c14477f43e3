"""The detokenizer role: per-request incremental text from each scheduler step's token deltas."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from minisgl_core.text.incremental import Decode, IncrementalDetokenizer, StopCutter
from minisgl_core.text.reasoning import ReasoningSplitter, syntax_of
from minisgl_core.wire.schema import (
    DetokenizeInfo,
    ErrorInfo,
    PromptLogprobs,
    TextDelta,
    TextLogprob,
    TextPromptLogprobs,
    TokenBatch,
    TokenDelta,
)

log = logging.getLogger(__name__)

# How many finished request ids are remembered so that a late delta cannot re-create state.
MAX_TOMBSTONES = 65536


class _Request:
    """One live request: where its text goes and how far it has been turned into text."""

    __slots__ = ("owner", "detok", "stop", "reasoning", "unsent_ids", "unsent_logprobs",
                 "tool_parser")

    def __init__(self, owner: str, detok: IncrementalDetokenizer, stop: StopCutter | None,
                 reasoning: ReasoningSplitter | None = None, tool_parser: str | None = None):
        self.owner = owner
        self.tool_parser = tool_parser  # named on every delta, for the frontend's parser
        self.detok = detok
        self.stop = stop
        self.reasoning = reasoning  # splits a chat answer's text under --reasoning-parser
        self.unsent_ids: list[int] = []  # ids not yet carried by any TextDelta
        self.unsent_logprobs: list[TextLogprob] = []  # theirs, when the request asked


class DetokenizerRole:
    """Turns TokenBatches into TextDeltas grouped by owner (the frontend that gets them).

    State for a request is created only by a delta that carries ``detokenize`` info, deleted on
    its terminal delta (in ``finally``), and never re-created: deltas for unknown or finished ids
    are dropped. Each request gets exactly one TextDelta with a finish_reason, and it is its last.
    """

    def __init__(self, model_dir: str | Path | None = None, *, tokenizer: Any = None,
                 max_hold: int = 8, window: int = 16) -> None:
        from minisgl_core.text.hf import eos_token_ids, load_tokenizer, raw_decoder

        if tokenizer is None:
            if model_dir is None:
                raise ValueError("DetokenizerRole needs a model_dir or a tokenizer")
            tokenizer = load_tokenizer(model_dir)
        self.tokenizer = tokenizer
        self._decoders: dict[bool, Decode] = {
            skip: raw_decoder(tokenizer, skip) for skip in (True, False)}
        # EOS ending a "stop" request is how it stopped, not text: never rendered.
        self.eos_token_ids = eos_token_ids(tokenizer, model_dir)
        self._max_hold, self._window = max_hold, window
        self._token_text: dict[int, str] = {}  # id -> the id decoded alone (logprobs' "token")
        self._states: dict[str, _Request] = {}
        self._finished: dict[str, None] = {}  # ordered set of recently finished ids

    def close(self) -> None:
        """Nothing to release: the tokenizer is plain memory."""

    def active_count(self) -> int:
        """Requests with live state (0 when the service is idle)."""
        return len(self._states)

    def discard(self, request_id: str) -> bool:
        """Forget a request without emitting anything; True if it was live."""
        state = self._states.pop(request_id, None)
        if state is not None:
            self._tombstone(request_id)
        return state is not None

    def process(self, batch: TokenBatch) -> dict[str, list[TextDelta]]:
        """Handle one scheduler step; return the TextDeltas to send, keyed by owner."""
        out: dict[str, list[TextDelta]] = {}
        states = self._states
        for delta in batch.deltas:
            rid = delta.request_id
            state = states.get(rid)
            if state is None:
                if delta.detokenize is None or rid in self._finished:
                    continue  # unknown or already finished: dropped, never resurrected
                state = self._create(rid, delta.detokenize)
            owner = state.owner
            text_delta: TextDelta | None
            if delta.finish_reason is None:
                try:
                    text_delta = self._step(state, delta)
                except Exception as exc:  # never let one request take the process down
                    text_delta = self._fail(rid, state, delta, exc)
            else:
                text_delta = self._finish(rid, state, delta)
            if text_delta is not None:
                out.setdefault(owner, []).append(text_delta)
        return out

    # ---- internals ------------------------------------------------------------------------

    def _create(self, rid: str, info: DetokenizeInfo) -> _Request:
        decode = self._decoders[info.skip_special_tokens]
        try:
            detok = IncrementalDetokenizer(decode, info.prompt_tail_ids, max_hold=self._max_hold,
                                           window=self._window)
        except Exception as exc:  # a seed the tokenizer cannot decode: start without context
            log.warning("request %s: ignoring an undecodable prompt tail (%r)", rid, exc)
            detok = IncrementalDetokenizer(decode, (), max_hold=self._max_hold,
                                           window=self._window)
        splitter = None if info.reasoning_parser is None else ReasoningSplitter(
            syntax_of(info.reasoning_parser), info.reasoning_open)
        state = _Request(info.owner, detok, StopCutter(info.stop) if info.stop else None,
                         splitter, info.tool_parser)
        self._states[rid] = state
        return state

    def _text(self, state: _Request, token_ids: tuple[int, ...]) -> str:
        if state.stop is not None and state.stop.matched is not None:
            return ""  # the text ended at a stop string: later tokens are not rendered
        text = state.detok.push(token_ids)
        return state.stop.feed(text) if state.stop is not None and text else text

    def _step(self, state: _Request, delta: TokenDelta) -> TextDelta | None:
        prompt = self._prompt_logprobs(delta.prompt_logprobs)
        text = self._text(state, delta.token_ids)
        reasoning = ""
        if state.reasoning is not None and text:
            reasoning, text = state.reasoning.feed(text)
        state.unsent_ids.extend(delta.token_ids)
        state.unsent_logprobs.extend(self._logprobs(delta))
        if not text and not reasoning:  # nothing to show yet; the ids ride on the next delta
            return None if prompt is None else TextDelta(request_id=delta.request_id,
                                                         prompt_logprobs=prompt)
        ids, logprobs = tuple(state.unsent_ids), tuple(state.unsent_logprobs)
        state.unsent_ids.clear()
        state.unsent_logprobs.clear()
        return TextDelta(request_id=delta.request_id, text=text, token_ids=ids, logprobs=logprobs,
                         prompt_logprobs=prompt, reasoning=reasoning,
                         tool_parser=state.tool_parser)

    def _prompt_logprobs(self, p: PromptLogprobs | None) -> TextPromptLogprobs | None:
        """The prompt decoded once, and each of its tokens (and alternatives) decoded alone."""
        if p is None:
            return None
        text = self._token_text_of
        return TextPromptLogprobs(self._decoders[False](p.token_ids), p,
                                  tuple(text(t) for t in p.token_ids),
                                  tuple(tuple(text(t) for t, _ in e.top) for e in p.entries))

    def _logprobs(self, delta: TokenDelta) -> list[TextLogprob]:
        """The delta's logprobs with every token as text (each decoded alone, specials shown)."""
        if not delta.logprobs:
            return []
        text = self._token_text_of
        return [TextLogprob(tok, text(tok), lp.logprob, tuple((text(t), v) for t, v in lp.top))
                for tok, lp in zip(delta.token_ids, delta.logprobs, strict=True)]

    def _token_text_of(self, token_id: int) -> str:
        text = self._token_text.get(token_id)
        if text is None:  # at most one entry per vocabulary id
            text = self._token_text[token_id] = self._decoders[False]([token_id])
        return text

    def _finish(self, rid: str, state: _Request, delta: TokenDelta) -> TextDelta:
        text, error, reason, reasoning = "", delta.error, delta.finish_reason, ""
        prompt = None
        try:
            prompt = self._prompt_logprobs(delta.prompt_logprobs)
            render = delta.token_ids
            if delta.finish_reason == "stop" and render and render[-1] in self.eos_token_ids:
                render = render[:-1]
            text = self._text(state, render)
            stop = state.stop
            if stop is None:
                text += state.detok.finish()
            elif stop.matched is None:
                text += stop.feed(state.detok.finish()) + stop.flush()
            if state.reasoning is not None:
                reasoning, text = state.reasoning.feed(text)
                tail_reasoning, tail = state.reasoning.finish()
                reasoning, text = reasoning + tail_reasoning, text + tail
        except Exception as exc:
            log.exception("detokenizing the end of request %s failed", rid)
            if error is None:
                error = ErrorInfo(f"detokenization failed: {type(exc).__name__}", "server_error")
                reason = "error"
        finally:
            self._states.pop(rid, None)
            self._tombstone(rid)
        logprobs: list[TextLogprob] = []
        if error is None:
            logprobs = [*state.unsent_logprobs, *self._logprobs(delta)]
        return TextDelta(request_id=rid, text=text,
                         token_ids=(*state.unsent_ids, *delta.token_ids),
                         finish_reason=reason, prompt_tokens=delta.prompt_tokens,
                         completion_tokens=delta.completion_tokens,
                         cached_tokens=delta.cached_tokens, error=error,
                         logprobs=tuple(logprobs),
                         prompt_logprobs=prompt if error is None else None,
                         reasoning=reasoning,
                         stop_string=None if state.stop is None else state.stop.matched,
                         tool_parser=state.tool_parser)

    def _fail(self, rid: str, state: _Request, delta: TokenDelta, exc: Exception) -> TextDelta:
        """End a request the detokenizer cannot handle: one terminal error delta, state gone."""
        log.error("detokenizing request %s failed: %r", rid, exc)
        self._states.pop(rid, None)
        self._tombstone(rid)
        return TextDelta(request_id=rid, token_ids=(*state.unsent_ids, *delta.token_ids),
                         finish_reason="error",
                         prompt_tokens=delta.prompt_tokens,
                         completion_tokens=delta.completion_tokens,
                         error=ErrorInfo("detokenization failed", "server_error"))

    def _tombstone(self, rid: str) -> None:
        finished = self._finished
        finished[rid] = None
        if len(finished) > MAX_TOMBSTONES:
            del finished[next(iter(finished))]
