"""The tokenizer role: prompt text, chat messages or token ids -> a TokenizedRequest; and the
frontends' /tokenize and /detokenize, answered with the same tokenizer and chat template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from minisgl_core.rejection import RequestRejected
from minisgl_core.text import reasoning, tool_parsers
from minisgl_core.text.chat_tools import conversation
from minisgl_core.wire.schema import (
    DetokenizeCall,
    DetokenizeInfo,
    ErrorInfo,
    GenerateRequest,
    SamplingParams,
    TokenizeCall,
    TokenizedRequest,
    TokenizerReply,
)

CHAT_ROLES = ("system", "user", "assistant", "tool")
# Prompt ids handed to the detokenizer as context for the first output token (its leading space).
PROMPT_TAIL = 6
# Longest piece of user input an error message may quote.
QUOTE_LIMIT = 40
# chat_template_kwargs may not set what the request's own fields (or the renderer) set
RESERVED_TEMPLATE_KWARGS = ("messages", "conversation", "tools", "documents",
                            "add_generation_prompt", "tokenize", "continue_final_message")


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= QUOTE_LIMIT else text[: QUOTE_LIMIT - 3] + "..."


class TokenizerRole:
    """Tokenizes requests with the model's HF tokenizer and chat template, in one thread.

    ``tokenize`` never raises: a request that cannot be served comes back with ``error`` set
    and empty ``prompt_ids``, for the scheduler to reject at once.
    """

    def __init__(self, model_dir: str | Path, max_context: int, vocab_size: int | None = None,
                 *, tokenizer: Any = None, reasoning_parser: str | None = None,
                 tool_call_parser: str | None = None) -> None:
        from minisgl_core.text.hf import eos_token_ids, load_tokenizer

        if max_context < 2:
            raise ValueError(f"max_context must be at least 2, got {max_context}")
        self.model_dir = Path(model_dir)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_dir)
        self.max_context = int(max_context)
        self.vocab_size = int(vocab_size) if vocab_size is not None else len(self.tokenizer)
        self.eos_token_ids: frozenset[int] = eos_token_ids(self.tokenizer, model_dir)
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        # the format of a chat answer's tool calls: --tool-call-parser, else the template's
        self.tool_parser = tool_call_parser or tool_parsers.detect(
            getattr(self.tokenizer, "chat_template", None))
        # chat answers are split into reasoning and content (--reasoning-parser)
        self.reasoning = None if reasoning_parser is None else reasoning.syntax_of(
            reasoning_parser)
        self._reasoning_end_ids: tuple[int, ...] = () if self.reasoning is None else tuple(
            self.tokenizer.encode(self.reasoning.end, add_special_tokens=False))

    def close(self) -> None:
        """Nothing to release: the tokenizer is plain memory."""

    def tokenize(self, req: GenerateRequest) -> TokenizedRequest:
        """Turn one GenerateRequest into a TokenizedRequest (with ``error`` set if it is bad)."""
        info = DetokenizeInfo(owner=req.owner, stop=req.sampling.stop,
                              skip_special_tokens=req.sampling.skip_special_tokens)
        try:
            ids, param, chat_text = self._prompt_ids(req)
            self._check_length(len(ids), req.sampling, param)
        except RequestRejected as exc:
            return self._reject(req, info, exc.info())
        except Exception as exc:  # a tokenizer bug must not take the process down
            return self._reject(req, info, ErrorInfo(
                f"tokenization failed: {type(exc).__name__}", "server_error"))
        tail = ids[-PROMPT_TAIL:]
        info = DetokenizeInfo(owner=req.owner, prompt_tail_ids=tail, stop=req.sampling.stop,
                              skip_special_tokens=req.sampling.skip_special_tokens)
        sampling = req.sampling
        if req.tools is not None and chat_text is not None:
            info = msgspec.structs.replace(info, tool_parser=self.tool_parser)
            if self.tool_parser in tool_parsers.KEEP_SPECIAL_TOKENS:  # its call marker
                info = msgspec.structs.replace(info, skip_special_tokens=False)
        if self.reasoning is not None and chat_text is not None:  # chat answers only
            state = reasoning.prompt_state(chat_text, self.reasoning)
            info = msgspec.structs.replace(
                info, reasoning_parser=self.reasoning.name,
                reasoning_open=reasoning.begins_inside(state, self.reasoning))
            if sampling.structured is not None and state != "closed":
                # the grammar constrains the answer, after the reasoning (as vLLM does)
                sampling = msgspec.structs.replace(sampling, structured=msgspec.structs.replace(
                    sampling.structured, wait_for=self._reasoning_end_ids))
        return TokenizedRequest(request_id=req.request_id, prompt_ids=ids, sampling=sampling,
                                detokenize=info, arrival_time=req.arrival_time)

    def encode(self, req: GenerateRequest, *, add_generation_prompt: bool = True
               ) -> tuple[int, ...]:
        """The prompt ids ``tokenize`` would send for ``req`` (its length unchecked); raises
        RequestRejected."""
        if req.messages is not None and req.prompt is None and req.token_ids is None:
            return self._chat_ids(req, add_generation_prompt=add_generation_prompt)[0]
        return self._prompt_ids(req)[0]

    def tokenize_call(self, call: TokenizeCall) -> TokenizerReply:
        """/tokenize: the ids ``call.request`` would send (``interfaces.TokenizerCalls``)."""
        req = call.request
        if req.prompt is not None and req.messages is None:  # a completion's prompt as sent
            if not req.prompt:
                raise RequestRejected("the prompt is empty", param="prompt")
            add = True if call.add_special_tokens is None else call.add_special_tokens
            ids = tuple(self.tokenizer.encode(req.prompt, add_special_tokens=add))
        else:
            ids = self.encode(req, add_generation_prompt=call.add_generation_prompt)
            bos = self.tokenizer.bos_token_id
            if call.add_special_tokens and bos is not None:  # the template wrote its own
                ids = (bos, *ids)
        strs = tuple(self.tokenizer.convert_ids_to_tokens(list(ids))) if call.token_strs else None
        return TokenizerReply(call.call_id, token_ids=ids, token_strs=strs)

    def detokenize_call(self, call: DetokenizeCall) -> TokenizerReply:
        """/detokenize: the ids as text, special tokens kept (``interfaces.TokenizerCalls``)."""
        if any(not 0 <= t < self.vocab_size for t in call.token_ids):
            raise RequestRejected(f"token ids must be below the vocabulary size "
                                  f"({self.vocab_size})", param="tokens")
        return TokenizerReply(call.call_id, text=self.tokenizer.decode(list(call.token_ids)))

    # ---- internals ------------------------------------------------------------------------

    def _reject(self, req: GenerateRequest, info: DetokenizeInfo,
                error: ErrorInfo) -> TokenizedRequest:
        return TokenizedRequest(request_id=req.request_id, prompt_ids=(), sampling=req.sampling,
                                detokenize=info, arrival_time=req.arrival_time, error=error)

    def _prompt_ids(self, req: GenerateRequest) -> tuple[tuple[int, ...], str, str | None]:
        """The prompt ids, the request field they came from, and a chat's rendered text."""
        given = [name for name in ("prompt", "messages", "token_ids")
                 if getattr(req, name) is not None]
        if len(given) != 1:
            raise RequestRejected("exactly one of prompt, messages or token_ids must be given, "
                                  f"got {', '.join(given) or 'none'}", param="prompt")
        if req.prompt is not None:
            if not req.prompt:
                raise RequestRejected("the prompt is empty", param="prompt")
            ids = tuple(self.tokenizer.encode(req.prompt, add_special_tokens=True))
            if not ids:
                raise RequestRejected("the prompt has no tokens", param="prompt")
            return ids, "prompt", None
        if req.messages is not None:
            ids, text = self._chat_ids(req)
            return ids, "messages", text
        return self._check_ids(req.token_ids or ()), "prompt", None

    def _chat_ids(self, req: GenerateRequest, *, add_generation_prompt: bool = True
                  ) -> tuple[tuple[int, ...], str]:
        """The chat prompt's ids and the text the template rendered."""
        messages = req.messages or ()
        if not messages:
            raise RequestRejected("messages must not be empty", param="messages")
        for i, message in enumerate(messages):
            if message.role not in CHAT_ROLES:
                raise RequestRejected(f"messages[{i}].role {_quote(message.role)} is not "
                                      f"supported; use one of {', '.join(CHAT_ROLES)}",
                                      param=f"messages[{i}].role")
        if not self.has_chat_template:
            raise RequestRejected("this model has no chat template; send a prompt instead",
                                  param="messages")
        extra = self._template_kwargs(req.chat_template_kwargs)
        try:
            turns, tools = conversation(messages, req.tools, self.tokenizer.chat_template)
            if tools is not None:
                extra["tools"] = tools
            text = self.tokenizer.apply_chat_template(
                turns, tokenize=False, add_generation_prompt=add_generation_prompt, **extra)
        except Exception as exc:  # jinja errors, raise_exception() in the template
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RequestRejected(f"the chat template rejected the messages: {reason[:200]}",
                                  param="messages") from None
        # The template writes the special tokens (BOS...) itself.
        ids = tuple(self.tokenizer.encode(text, add_special_tokens=False))
        if not ids:
            raise RequestRejected("the chat template produced an empty prompt", param="messages")
        return ids, text

    def _template_kwargs(self, raw: str | None) -> dict[str, Any]:
        """``chat_template_kwargs`` (JSON object text) as the template's extra variables."""
        if not raw:
            return {}
        try:
            kwargs = json.loads(raw)
        except ValueError:
            raise RequestRejected("chat_template_kwargs must be a JSON object",
                                  param="chat_template_kwargs") from None
        if not isinstance(kwargs, dict):
            raise RequestRejected("chat_template_kwargs must be an object",
                                  param="chat_template_kwargs")
        reserved = sorted(k for k in kwargs if k in RESERVED_TEMPLATE_KWARGS)
        if reserved:
            raise RequestRejected(f"chat_template_kwargs may not set {', '.join(reserved)} (the "
                                  f"request's own fields do)", param="chat_template_kwargs")
        return kwargs

    def _check_ids(self, token_ids: tuple[int, ...]) -> tuple[int, ...]:
        if not token_ids:
            raise RequestRejected("the prompt has no tokens", param="prompt")
        vocab = self.vocab_size
        for i, tid in enumerate(token_ids):
            if not 0 <= tid < vocab:
                raise RequestRejected(f"token id {_quote(tid)} at position {i} is outside the "
                                      f"vocabulary [0, {vocab})", param="prompt")
        return tuple(token_ids)

    def _check_length(self, n: int, sampling: SamplingParams, param: str) -> None:
        limit = self.max_context
        where = "messages" if param == "messages" else "prompt"
        if n >= limit:
            detail = f"your {where} resulted in {n} tokens"
            if n == limit:
                detail += ", which leaves no room for the completion"
            raise RequestRejected(f"This model's maximum context length is {limit} tokens. "
                                  f"However, {detail}. Please reduce the length of the {where}.",
                                  code="context_length_exceeded", param=param)
        max_tokens = sampling.max_tokens
        if max_tokens is not None and n + max_tokens > limit:
            raise RequestRejected(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{n + max_tokens} tokens ({n} in the {where}, {max_tokens} in the completion). "
                f"Please reduce the length of the {where} or max_tokens.",
                code="context_length_exceeded", param="max_tokens")
