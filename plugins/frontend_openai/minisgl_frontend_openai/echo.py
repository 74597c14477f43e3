"""Prompt log-probabilities in OpenAI shapes: completions' ``echo`` and vLLM's ``prompt_logprobs``.

With ``echo`` a completion choice starts with its prompt: the text (the prompt string as sent, or
the decoded ids of a token-id prompt) and, with ``logprobs``, the prompt's tokens in the legacy
``logprobs`` object before the generated ones, the first with ``None`` (nothing predicts it).
That is what log-likelihood evaluations (lm-evaluation-harness' ``local-completions``) read.
``max_tokens: 0`` with ``echo`` scores the prompt only: the one token the engine samples is
left out of the answer and of the usage. ``prompt_logprobs: k`` (vLLM's extension) adds, per
choice of a completion and once per chat response, one entry per prompt token keyed by token id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from minisgl_core.api import TextLogprob, TextPromptLogprobs
from minisgl_frontend_openai.generation import ChoiceState, Usage
from minisgl_frontend_openai.responses import CompletionFormat, vllm_prompt_logprobs
from minisgl_frontend_openai.schemas import CompletionRequest, Prompt


class EchoCompletionFormat(CompletionFormat):
    """CompletionFormat with ``echo`` and/or ``prompt_logprobs``.

    ``prompt_texts[i]`` is choice i's prompt string, or None for a token-id prompt (its decoded
    ids are echoed then); ``top`` is the legacy ``logprobs`` count that cuts the prompt entries'
    alternatives (the engine computed as many as the larger of the two asks).
    """

    def __init__(self, *, echo: bool, echo_only: bool, prompt_texts: Sequence[str | None],
                 top: int, prompt_logprobs: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.echo = echo
        self.echo_only = echo_only
        self.prompt_texts = list(prompt_texts)
        self.top = top
        self.prompt_logprobs = prompt_logprobs

    def _prompt_text(self, index: int, p: TextPromptLogprobs) -> str:
        given = self.prompt_texts[index]
        return p.text if given is None else given

    def _legacy(self, index: int, p: TextPromptLogprobs) -> dict[str, Any]:
        """The prompt's part of the legacy logprobs object (advances the choice's offsets)."""
        entries = p.logprobs.entries
        offsets, at = [], self._offsets.get(index, 0)
        for token in p.tokens:
            offsets.append(at)
            at += len(token)
        self._offsets[index] = at
        tops = [{s: v for s, (_, v) in zip(texts, e.top[:self.top], strict=False)}
                for e, texts in zip(entries, p.top_tokens, strict=True)]
        return {"tokens": list(p.tokens), "token_logprobs": [None, *(e.logprob for e in entries)],
                "top_logprobs": [None, *tops], "text_offset": offsets}

    def prompt_chunk(self, index: int, p: TextPromptLogprobs) -> dict[str, Any] | None:
        """The stream chunk that echoes choice ``index``'s prompt (None without ``echo``)."""
        if not self.echo:
            return None
        choice = self._chunk_choice(index, self._prompt_text(index, p), None)
        if self.logprobs:
            choice["logprobs"] = self._legacy(index, p)
        if self.return_token_ids:
            choice["prompt_token_ids"] = list(p.logprobs.token_ids)
        return self._envelope(self.chunk_object_name, [choice])

    def text_chunk(self, index: int, text: str, token_ids: Sequence[int] = (),
                   logprobs: Sequence[TextLogprob] = ()) -> dict[str, Any] | None:
        if self.echo_only:
            return None  # the sampled token is not part of an echo-only answer
        return super().text_chunk(index, text, token_ids, logprobs)

    def final_chunk(self, index: int, reason: str, token_ids: Sequence[int] = (),
                    logprobs: Sequence[TextLogprob] = ()) -> dict[str, Any]:
        if self.echo_only:
            return super().final_chunk(index, "length")
        return super().final_chunk(index, reason, token_ids, logprobs)

    def usage_chunk(self, usage: Usage) -> dict[str, Any]:
        return super().usage_chunk(self._usage(usage))

    def _usage(self, usage: Usage) -> Usage:
        return dataclasses.replace(usage, completion_tokens=0) if self.echo_only else usage

    def full(self, choices: Sequence[ChoiceState], usage: Usage) -> dict[str, Any]:
        out = self._envelope(self.object_name, [self._echo_choice(i, c)
                                                for i, c in enumerate(choices)])
        out["usage"] = self._usage(usage).as_dict()
        return out

    def _echo_choice(self, index: int, c: ChoiceState) -> dict[str, Any]:
        p = c.prompt_logprobs
        if self.echo_only:
            c = dataclasses.replace(c, text=[], token_ids=[], logprobs=[], finish_reason="length")
        choice = self._full_choice(index, c)
        if self.return_token_ids:
            choice["token_ids"] = list(c.token_ids)
        echoed = self.echo and p is not None
        # the prompt's offsets come first: its part is built before the generated part
        parts = [self._legacy(index, p)] if echoed and self.logprobs and p is not None else []
        if self.logprobs and c.logprobs:
            parts.append(self._logprobs(index, c.logprobs))
        if parts:
            choice["logprobs"] = {key: [v for part in parts for v in part[key]]
                                  for key in parts[0]}
        if p is not None and echoed:
            choice["text"] = self._prompt_text(index, p) + choice["text"]
            if self.return_token_ids:
                choice["prompt_token_ids"] = list(p.logprobs.token_ids)
        if p is not None and self.prompt_logprobs is not None:
            choice["prompt_logprobs"] = vllm_prompt_logprobs(p, self.prompt_logprobs)
        return choice


def completion_format(req: CompletionRequest, prompts: Sequence[Prompt],
                      **kwargs: Any) -> CompletionFormat:
    """The format of a /v1/completions answer: the plain one unless the prompt is asked for."""
    if not req.echo and req.prompt_logprobs is None:
        return CompletionFormat(**kwargs)
    n = req.choices_per_prompt
    texts = [p if isinstance(p, str) else None for p in prompts for _ in range(n)]
    return EchoCompletionFormat(echo=bool(req.echo), echo_only=req.echo_only, prompt_texts=texts,
                                top=req.logprobs or 0, prompt_logprobs=req.prompt_logprobs,
                                **kwargs)
