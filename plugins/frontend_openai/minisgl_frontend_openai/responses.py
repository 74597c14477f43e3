"""The JSON shapes of OpenAI responses and stream chunks, for chat and text completions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from minisgl_core.api import TextDelta, TextLogprob, TextPromptLogprobs
from minisgl_frontend_openai.generation import ChoiceState, Usage


class CompletionFormat:
    """``text_completion`` objects: one for the whole answer, or one per stream chunk.

    With ``return_token_ids`` (as vLLM spells it) every choice, and every stream chunk that
    carries new tokens, has ``token_ids``: the generated ids (EOS included), in order. With
    ``logprobs``, the same tokens' logprobs in the legacy completions shape (``tokens``,
    ``token_logprobs``, ``top_logprobs``, ``text_offset``).
    """

    object_name = "text_completion"
    chunk_object_name = "text_completion"

    def __init__(self, *, response_id: str, model: str, created: int,
                 include_usage: bool, return_token_ids: bool = False,
                 logprobs: bool = False) -> None:
        self.response_id = response_id
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self.return_token_ids = return_token_ids
        self.logprobs = logprobs
        self._offsets: dict[int, int] = {}  # choice -> text offset of its next token

    def _with_ids(self, choice: dict[str, Any], token_ids: Sequence[int],
                  logprobs: Sequence[TextLogprob] = ()) -> dict[str, Any]:
        if self.return_token_ids:
            choice["token_ids"] = list(token_ids)
        if self.logprobs and logprobs:
            choice["logprobs"] = self._logprobs(choice["index"], logprobs)
        return choice

    def _logprobs(self, index: int, entries: Sequence[TextLogprob]) -> dict[str, Any]:
        offsets, at = [], self._offsets.get(index, 0)
        for e in entries:
            offsets.append(at)
            at += len(e.token)
        self._offsets[index] = at
        return {"tokens": [e.token for e in entries],
                "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [dict(e.top) for e in entries], "text_offset": offsets}

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        out = {"id": self.response_id, "object": obj, "created": self.created,
               "model": self.model, "system_fingerprint": None, "choices": choices}
        if self.include_usage:
            out["usage"] = None  # every chunk but the last carries an explicit null
        return out

    def _chunk_choice(self, index: int, text: str, reason: str | None) -> dict[str, Any]:
        return {"index": index, "text": text, "logprobs": None, "finish_reason": reason}

    def first_chunks(self, n: int) -> list[dict[str, Any]]:
        """Chunks sent before any text (none for text completions)."""
        return []

    def delta_chunks(self, index: int, delta: TextDelta) -> list[dict[str, Any]]:
        """The stream chunks one TextDelta of choice ``index`` becomes (in order)."""
        out = []
        if delta.prompt_logprobs is not None and (
                echoed := self.prompt_chunk(index, delta.prompt_logprobs)) is not None:
            out.append(echoed)
        ids, logprobs = delta.token_ids, delta.logprobs
        if delta.text:
            if (chunk := self.text_chunk(index, delta.text, ids, logprobs)) is not None:
                out.append(chunk)
            ids, logprobs = (), ()
        if delta.finish_reason is not None:
            out.append(self.final_chunk(index, delta.finish_reason, ids, logprobs))
        return out

    def prompt_chunk(self, index: int, p: TextPromptLogprobs) -> dict[str, Any] | None:
        """The chunk that echoes choice ``index``'s prompt (None: this format echoes none)."""
        return None

    def text_chunk(self, index: int, text: str, token_ids: Sequence[int] = (),
                   logprobs: Sequence[TextLogprob] = ()) -> dict[str, Any] | None:
        """A non-final chunk with new text (``finish_reason: null``) and the ids behind it
        (None: a subclass sends nothing for it)."""
        choice = self._with_ids(self._chunk_choice(index, text, None), token_ids, logprobs)
        return self._envelope(self.chunk_object_name, [choice])

    def final_chunk(self, index: int, reason: str, token_ids: Sequence[int] = (),
                    logprobs: Sequence[TextLogprob] = ()) -> dict[str, Any]:
        """The one chunk per choice that carries its finish reason (and ids not sent yet)."""
        choice = self._with_ids(self._final_choice(index, reason), token_ids, logprobs)
        return self._envelope(self.chunk_object_name, [choice])

    def _final_choice(self, index: int, reason: str) -> dict[str, Any]:
        return self._chunk_choice(index, "", reason)

    def usage_chunk(self, usage: Usage) -> dict[str, Any]:
        """The extra last chunk for ``stream_options.include_usage``: no choices, the usage."""
        out = self._envelope(self.chunk_object_name, [])
        out["usage"] = usage.as_dict()
        return out

    def full(self, choices: Sequence[ChoiceState], usage: Usage) -> dict[str, Any]:
        """The non-streaming response."""
        out = self._envelope(self.object_name, [
            self._with_ids(self._full_choice(i, c), c.token_ids, c.logprobs)
            for i, c in enumerate(choices)])
        out["usage"] = usage.as_dict()
        return out

    def _full_choice(self, index: int, choice: ChoiceState) -> dict[str, Any]:
        return {"index": index, "text": "".join(choice.text), "logprobs": None,
                "finish_reason": choice.finish_reason}


class ChatFormat(CompletionFormat):
    """``chat.completion`` / ``chat.completion.chunk`` objects, with vLLM's top-level
    ``prompt_logprobs`` (the conversation's, once) when ``prompt_logprobs`` is set."""

    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"

    def __init__(self, *, prompt_logprobs: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prompt_logprobs = prompt_logprobs

    def full(self, choices: Sequence[ChoiceState], usage: Usage) -> dict[str, Any]:
        out = super().full(choices, usage)
        first = next((c.prompt_logprobs for c in choices if c.prompt_logprobs), None)
        if first is not None and self.prompt_logprobs is not None:
            out["prompt_logprobs"] = vllm_prompt_logprobs(first, self.prompt_logprobs)
        return out

    def _chunk_choice(self, index: int, text: str, reason: str | None) -> dict[str, Any]:
        return {"index": index, "delta": {"content": text}, "logprobs": None,
                "finish_reason": reason}

    def delta_chunks(self, index: int, delta: TextDelta) -> list[dict[str, Any]]:
        chunks, rest = self.reasoning_chunks(index, delta)
        return chunks + super().delta_chunks(index, rest)

    def reasoning_chunks(self, index: int, delta: TextDelta
                         ) -> tuple[list[dict[str, Any]], TextDelta]:
        """The chunk of a delta's reasoning (``delta.reasoning_content``, under
        --reasoning-parser) and the rest of the delta; the chunk carries the delta's ids and
        logprobs when no other chunk of it will."""
        if not delta.reasoning:
            return [], delta
        choice = {"index": index, "delta": {"reasoning_content": delta.reasoning},
                  "logprobs": None, "finish_reason": None}
        rest = msgspec.structs.replace(delta, reasoning="")
        if not delta.text and delta.finish_reason is None:
            choice = self._with_ids(choice, delta.token_ids, delta.logprobs)
            rest = msgspec.structs.replace(rest, token_ids=(), logprobs=())
        return [self._envelope(self.chunk_object_name, [choice])], rest

    def _final_choice(self, index: int, reason: str) -> dict[str, Any]:
        return {"index": index, "delta": {}, "logprobs": None, "finish_reason": reason}

    def _logprobs(self, index: int, entries: Sequence[TextLogprob]) -> dict[str, Any]:
        return {"content": [{**_token(e.token, e.logprob), "top_logprobs": [
            _token(token, logprob) for token, logprob in e.top]} for e in entries]}

    def first_chunks(self, n: int) -> list[dict[str, Any]]:
        """One chunk per choice announcing the assistant role, with empty content."""
        return [self._envelope(self.chunk_object_name, [
            {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
             "finish_reason": None}]) for i in range(n)]

    def _full_choice(self, index: int, choice: ChoiceState) -> dict[str, Any]:
        message = with_reasoning({"role": "assistant", "content": "".join(choice.text)}, choice)
        return {"index": index, "message": message, "logprobs": None,
                "finish_reason": choice.finish_reason}


def with_reasoning(message: dict[str, Any], choice: ChoiceState) -> dict[str, Any]:
    """``message`` with the choice's ``reasoning_content``, when it reasoned (a reasoning parser
    is on); without one the message is as it always was."""
    if choice.reasoning:
        message["reasoning_content"] = "".join(choice.reasoning)
    return message


def vllm_prompt_logprobs(p: TextPromptLogprobs, k: int) -> list[dict[str, Any] | None]:
    """vLLM's ``prompt_logprobs``: None, then per token ``{id: {logprob, rank, decoded_token}}``
    for the prompt token and its ``k`` most likely alternatives."""
    out: list[dict[str, Any] | None] = [None]
    pairs = zip(p.logprobs.token_ids[1:], p.tokens[1:], p.logprobs.entries, p.top_tokens,
                p.logprobs.ranks, strict=True)
    for tok, text, entry, top_texts, rank in pairs:
        ranked = {str(t): {"logprob": v, "rank": i + 1, "decoded_token": s}
                  for i, ((t, v), s) in enumerate(zip(entry.top[:k], top_texts, strict=False))}
        ranked.setdefault(str(tok), {"logprob": entry.logprob, "rank": rank,
                                     "decoded_token": text})
        out.append(ranked)
    return out


def _token(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}
