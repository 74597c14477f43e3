"""Anthropic's ``thinking.budget_tokens``: a reasoning model's thinking cut after that many tokens,
then its answer.

A generation whose thinking (what ``--reasoning-parser`` splits off, before any answer text)
reaches the budget is stopped there (its engine request aborted, its pages freed) and continued
by a second engine request: the same prompt, the thinking's tokens so far and the end of
thinking (``</think>``), so the model writes its answer after a thinking block closed for it.
The second request's prefix is the first's, which the prefix cache serves. Its deltas come on
as the first's would have (the same tool-call format, token counts from the first prompt);
without room left under ``max_tokens`` the answer ends there, as ``max_tokens``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import msgspec

from minisgl_core.api import EngineClient, GenerateRequest, SamplingParams, TextDelta


class ThinkingBudget:
    """Generates like ``client``, the thinking bounded to ``budget`` tokens (what a Generation
    needs of an EngineClient: ``generate``)."""

    def __init__(self, client: EngineClient, budget: int, end_of_thinking: str) -> None:
        self._client = client
        self._budget = budget
        self._end = end_of_thinking

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TextDelta]:
        """The request's deltas; past the budget, the continued answer's."""
        thinking: list[int] = []  # the tokens before any answer text
        thought = False  # some of them were reasoning (the model thinks at all)
        answering = False
        family: str | None = None
        first = self._client.generate(request)
        async with contextlib.aclosing(first):  # leaving early aborts the engine request
            async for delta in first:
                yield delta
                family = delta.tool_parser or family
                if delta.finish_reason is not None:
                    return
                answering = answering or bool(delta.text)
                if answering:
                    continue
                thinking.extend(delta.token_ids)
                thought = thought or bool(delta.reasoning)
                if thought and len(thinking) >= self._budget:
                    break
        async for delta in self._answer(request, thinking, family):
            yield delta

    async def _answer(self, request: GenerateRequest, thinking: list[int],
                      family: str | None) -> AsyncIterator[TextDelta]:
        """The answer after ``thinking`` and the end of thinking, as a new engine request."""
        rid = request.request_id
        prompt = await self._client.tokenize(request)
        end = await self._client.tokenize(GenerateRequest(
            request_id=rid, owner=request.owner, sampling=SamplingParams(), prompt=self._end),
            add_special_tokens=False)
        for reply in (prompt, end):
            if reply.error is not None:
                yield TextDelta(rid, finish_reason="error", error=reply.error)
                return
        spent = len(thinking) + len(end.token_ids)
        prompt_tokens = len(prompt.token_ids)
        limit = request.sampling.max_tokens
        if limit is not None and limit - spent < 1:  # no room for an answer
            yield TextDelta(rid, finish_reason="length", prompt_tokens=prompt_tokens,
                            completion_tokens=len(thinking))
            return
        sampling = msgspec.structs.replace(
            request.sampling, max_tokens=None if limit is None else limit - spent)
        answer = GenerateRequest(
            request_id=f"{rid}-answer", owner=request.owner, sampling=sampling,
            token_ids=(*prompt.token_ids, *thinking, *end.token_ids),
            arrival_time=request.arrival_time)
        async for delta in self._client.generate(answer):
            yield msgspec.structs.replace(
                delta, tool_parser=delta.tool_parser or family, prompt_tokens=prompt_tokens,
                completion_tokens=spent + delta.completion_tokens,
                cached_tokens=min(delta.cached_tokens, prompt_tokens))
