"""The offline API: ``LLM(model).generate(prompts, SamplingParams(...))`` in one process, and
``LLM.stream_chat`` for one conversation's text as it is decoded."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.sampling import SamplingParams, TokenLogprob

if TYPE_CHECKING:
    from minisgl_core.service.tp_local import LocalGroup

Prompt = str | Sequence[int]


@dataclass(frozen=True)
class RequestOutput:
    """One finished request: its prompt, generated tokens and text, and why it stopped."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list[TokenLogprob] | None = None  # one per token id, when sampling.logprobs is set
    # one per prompt token (None for the first), when sampling.prompt_logprobs is set
    prompt_logprobs: list[TokenLogprob | None] | None = None


@dataclass(frozen=True)
class StreamChunk:
    """New text of a streamed request; the last chunk has ``finish_reason`` set."""

    text: str
    finish_reason: str | None = None
    completion_tokens: int = 0  # generated so far


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the earliest occurrence of any stop string (the stop string excluded)."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return text if cut < 0 else text[:cut]


class LLM:
    """A model and an Engine in this process; generate() batches every prompt given to it.

    With ``tp`` > 1 the model is split over ``tp`` ranks: this process is rank 0 and the others
    run as ``minisgl tp-worker`` subprocesses until ``close()`` (or the end of a ``with``).
    The model is found as the service finds it: the plugins' resolvers and model classes
    (installed ones, ``MINISGL_PLUGINS`` and ``plugins``) come first, then the core's, which
    takes a directory, a ``.gguf`` file or a Hub id (``revision``, ``gguf_file`` as in
    ``minisgl launch``). ``quantization`` "auto" (the default) serves a GGUF in its own weight
    format and anything else unquantized; "none" opts out (engine/quantization_choice.py).
    """

    def __init__(self, model: str | None = None, dtype: str = "auto",
                 num_pages: int | None = None, page_size: int = 16,
                 max_seq_len_override: int | None = None, tp: int = 1,
                 plugins: Sequence[str | object] = (), revision: str | None = None,
                 gguf_file: str | None = None, quantization: str | None = "auto",
                 **options: Any) -> None:
        from minisgl_core.plugin.loading import build_manager, loaded_module_names
        from minisgl_core.plugin.model_lookup import resolve

        # the service's plugins: entry points, MINISGL_PLUGINS and ``plugins`` (module names or
        # objects) resolve the model and provide its class, here and on every tp rank
        pm = build_manager(extra=list(plugins))
        resolved = resolve(model, pm, revision=revision, gguf_file=gguf_file)
        config = EngineConfig(model=resolved.path, dtype=dtype, num_pages=num_pages,
                              page_size=page_size, max_seq_len_override=max_seq_len_override,
                              quantization=quantization, **options)
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        self._group: LocalGroup | None = None
        if tp == 1:
            self.engine = Engine(config, resolved.model_class)
        else:
            from minisgl_core.service.tp_local import LocalGroup

            self._group = LocalGroup(config, resolved.model_class, tp,
                                     plugin_modules=tuple(loaded_module_names(pm)))
            self.engine = self._group.engine
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()

    def close(self) -> None:
        """Stop the other tensor-parallel ranks, if any (idempotent; nothing to do without)."""
        if self._group is not None:
            self._group.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 sampling: SamplingParams | Sequence[SamplingParams] | None = None,
                 ) -> list[RequestOutput]:
        """Generate for each prompt (text or token ids); results come back in prompt order."""
        if isinstance(prompts, str) or (
                isinstance(prompts, Sequence) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        items: list[tuple[str | None, list[int]]] = []
        for p in prompts:  # type: ignore[union-attr]
            if isinstance(p, str):
                items.append((p, self.tokenizer.encode(p)))
            else:
                items.append((None, [int(t) for t in p]))
        return self._run(items, sampling)

    def chat(self, messages_list: Sequence[Sequence[Mapping[str, str]]],
             sampling: SamplingParams | Sequence[SamplingParams] | None = None,
             ) -> list[RequestOutput]:
        """Apply the model's chat template to each conversation, then generate."""
        return self._run([self._chat_prompt(m) for m in messages_list], sampling)

    def stream_chat(self, messages: Sequence[Mapping[str, str]],
                    sampling: SamplingParams | None = None) -> Iterator[StreamChunk]:
        """Generate for one conversation, yielding its text as the engine steps; closing the
        iterator early aborts the request. Text that may begin a stop string is held back
        until it cannot (the answer is cut before the stop string, as in ``generate``)."""
        from minisgl_core.text.hf import raw_decoder
        from minisgl_core.text.incremental import IncrementalDetokenizer
        from minisgl_core.text.tokenize import PROMPT_TAIL

        sp = sampling or SamplingParams()
        _, prompt_ids = self._chat_prompt(messages)
        rid = f"llm-{next(self._ids)}"
        detok = IncrementalDetokenizer(raw_decoder(self.tokenizer, sp.skip_special_tokens),
                                       prompt_ids[-PROMPT_TAIL:])
        hold = max((len(s) for s in sp.stop), default=1) - 1
        pending, finished = "", False
        self.engine.when_idle()  # decode graphs compiled meanwhile are loaded between calls
        self.engine.add_request(rid, prompt_ids, sp)
        try:
            for out in self.engine.run_until_idle():
                if out.error is not None:
                    raise out.error
                pending += detok.push(out.token_ids)
                if out.finish_reason is not None:
                    finished, pending = True, pending + detok.finish()
                    if sp.stop and out.finish_reason == "stop":
                        pending = cut_at_stop(pending, sp.stop)
                    yield StreamChunk(pending, out.finish_reason, out.completion_tokens)
                    return
                if len(pending) > hold:
                    cut = len(pending) - hold
                    yield StreamChunk(pending[:cut], None, out.completion_tokens)
                    pending = pending[cut:]
        finally:
            if not finished:
                self.engine.abort(rid)

    def _chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> tuple[str, list[int]]:
        text = self.tokenizer.apply_chat_template([dict(m) for m in messages],
                                                  add_generation_prompt=True, tokenize=False)
        # the template already holds any BOS: do not add special tokens twice
        return text, self.tokenizer.encode(text, add_special_tokens=False)

    def _run(self, items: list[tuple[str | None, list[int]]],
             sampling: SamplingParams | Sequence[SamplingParams] | None) -> list[RequestOutput]:
        if sampling is None:
            sampling = SamplingParams()
        params = [sampling] * len(items) if isinstance(sampling, SamplingParams) else list(sampling)
        if len(params) != len(items):
            raise ValueError(f"{len(items)} prompts but {len(params)} SamplingParams")
        ids = [f"llm-{next(self._ids)}" for _ in items]
        engine = self.engine
        tokens: dict[str, list[int]] = {rid: [] for rid in ids}
        logprobs: dict[str, list[TokenLogprob]] = {rid: [] for rid in ids}
        reasons: dict[str, str] = {}
        prompt_lps: dict[str, list[TokenLogprob | None]] = {}
        engine.when_idle()  # decode graphs compiled meanwhile are loaded between calls
        try:
            for rid, (_, prompt_ids), sp in zip(ids, items, params, strict=True):
                engine.add_request(rid, prompt_ids, sp)
            for out in engine.run_until_idle():
                if out.error is not None:  # e.g. a structured-output spec that does not compile
                    raise out.error
                tokens[out.request_id].extend(out.token_ids)
                logprobs[out.request_id].extend(out.logprobs)
                if out.prompt_logprobs is not None:
                    prompt_lps[out.request_id] = [None, *out.prompt_logprobs.entries]
                if out.finish_reason is not None:
                    reasons[out.request_id] = out.finish_reason
        finally:
            for rid in ids:
                if rid not in reasons:
                    engine.abort(rid)
        results = []
        for rid, (prompt, prompt_ids), sp in zip(ids, items, params, strict=True):
            text = self.tokenizer.decode(tokens[rid], skip_special_tokens=sp.skip_special_tokens)
            if sp.stop and reasons[rid] == "stop":
                text = cut_at_stop(text, sp.stop)
            results.append(RequestOutput(rid, prompt, prompt_ids, tokens[rid], text, reasons[rid],
                                         None if sp.logprobs is None else logprobs[rid],
                                         prompt_lps.get(rid)))
        return results
