"""The generation request bodies (chat and completions): their checks and the mapping to
SamplingParams.

Every sampling parameter is either mapped onto ``SamplingParams`` or rejected with a 400; unknown
extra fields are ignored (like vLLM), except known sampling-relevant ones this server does not
implement, which are rejected unless they carry their neutral value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import msgspec
from pydantic import Field

from minisgl_core.api import MAX_LOGPROBS, ChatMessage, SamplingParams
from minisgl_frontend_openai.body import Strict
from minisgl_frontend_openai.errors import bad_request
from minisgl_frontend_openai.messages import Message, chat_messages

MAX_N = 16  # choices per prompt
MAX_STOP = 16  # stop strings per request
MAX_PROMPTS = 64  # prompts in one /v1/completions call
MAX_CHOICES = 64  # prompts x n
MAX_LOGIT_BIAS = 1024  # entries in logit_bias
MAX_TOKEN_ID = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]
TopCount = Annotated[int, Field(ge=0, le=MAX_LOGPROBS)]
Count = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]

def _none(v: Any) -> bool:
    return v is None


def _off(v: Any) -> bool:
    return v is None or v is False


def _empty(v: Any) -> bool:
    return v is None or v in ({}, [], "")


# name -> "this value is neutral"; any other value is a 400 rather than a silent no-op
UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "functions": _empty,
    "function_call": lambda v: v is None or v == "none", "echo": _off, "suffix": _empty,
    "prediction": _none, "audio": _none,
    "modalities": lambda v: v is None or v == ["text"], "reasoning_effort": _none,
    "web_search_options": _none, "use_beam_search": _off, "include_stop_str_in_output": _off,
    "length_penalty": lambda v: v is None or v == 1, "logits_processors": _empty,
    "regex": _none, "ebnf": _none, "json_schema": _none,
    "add_generation_prompt": lambda v: v is None or v is True, "continue_final_message": _off,
    "chat_template": _none,
}


class StreamOptions(Strict):
    """``stream_options``: only ``include_usage`` is implemented."""

    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class _GenerationRequest(Strict):
    """Fields shared by /v1/chat/completions and /v1/completions."""

    model: str | None = None
    max_tokens: Count | None = None
    max_completion_tokens: Count | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: Annotated[int, Field(ge=-1, le=MAX_TOKEN_ID)] | None = None
    min_p: float | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] | None = None
    best_of: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[TokenId] | None = None
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    min_tokens: Count | None = None  # vLLM's: no EOS or stop_token_ids before this many tokens
    logit_bias: dict[str, float] | None = None  # token id (as a JSON key) -> bias in [-100, 100]
    return_token_ids: bool | None = None  # vLLM's extension: each choice's generated ids
    prompt_logprobs: TopCount | None = None  # vLLM's extension: each prompt token's logprob
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None

    @property
    def choices_per_prompt(self) -> int:
        return self.n or 1

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def check(self) -> None:
        """Reject unsupported and inconsistent parameters (400)."""
        for name, value in (self.model_extra or {}).items():
            neutral = UNSUPPORTED.get(name)
            if neutral is not None and not neutral(value):
                raise bad_request(f"'{name}' is not supported by this server", param=name,
                                  code="unsupported_parameter")
        if self.best_of is not None and self.best_of != self.choices_per_prompt:
            raise bad_request("'best_of' other than n is not supported", param="best_of",
                              code="unsupported_parameter")
        if self.stream_options is not None:
            if not self.stream:
                raise bad_request("'stream_options' is only allowed when 'stream' is true",
                                  param="stream_options")
            if self.stream_options.continuous_usage_stats:
                raise bad_request("'stream_options.continuous_usage_stats' is not supported",
                                  param="stream_options", code="unsupported_parameter")
        if self.prompt_logprobs is not None and self.stream:
            raise bad_request("'prompt_logprobs' is not available when 'stream' is true",
                              param="prompt_logprobs")
        if isinstance(self.stop, list) and len(self.stop) > MAX_STOP:
            raise bad_request(f"at most {MAX_STOP} stop strings are allowed, got {len(self.stop)}",
                              param="stop")

    def sampling(self) -> SamplingParams:
        """The SamplingParams for choice 0 (see ``for_choice`` for the others).

        Only their shape is checked here: whether prompt and max_tokens fit the context is the
        tokenizer's to say, once it knows the prompt's length in tokens.
        """
        max_tokens, param = self.max_tokens, "max_tokens"
        if self.max_completion_tokens is not None:
            if max_tokens is not None and max_tokens != self.max_completion_tokens:
                raise bad_request("'max_tokens' and 'max_completion_tokens' disagree; send one",
                                  param="max_completion_tokens")
            max_tokens, param = self.max_completion_tokens, "max_completion_tokens"
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        values: dict[str, Any] = {
            "max_tokens": max_tokens, "temperature": self.temperature, "top_p": self.top_p,
            # top_k = -1 is the common "disabled" spelling; minisgl spells it 0
            "top_k": 0 if self.top_k == -1 else self.top_k, "min_p": self.min_p,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "repetition_penalty": self.repetition_penalty, "seed": self.seed, "stop": stop,
            "stop_token_ids": tuple(self.stop_token_ids or ()), "ignore_eos": self.ignore_eos,
            "skip_special_tokens": self.skip_special_tokens, "min_tokens": self.min_tokens,
            "logit_bias": self._logit_bias(), "logprobs": self.top_count(),
            "prompt_logprobs": self.prompt_count(),
        }
        kwargs = {k: v for k, v in values.items() if v is not None or k == "max_tokens"}
        try:
            return SamplingParams(**kwargs)
        except ValueError as exc:
            message = str(exc)
            field = message.split(" ", 1)[0]
            if field == "max_tokens":  # named as the client sent it (max_completion_tokens)
                raise bad_request(param + message[len(field):], param=param) from None
            raise bad_request(message, param=field if field in values else None) from None

    def top_count(self) -> int | None:
        """How many top alternatives each token's logprob comes with; None: no logprobs."""
        return None

    def prompt_count(self) -> int | None:
        """Top alternatives per prompt token the engine computes; None: no prompt logprobs."""
        return self.prompt_logprobs

    def _logit_bias(self) -> tuple[tuple[int, float], ...] | None:
        if not self.logit_bias:
            return None
        if len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise bad_request(f"at most {MAX_LOGIT_BIAS} logit_bias entries are allowed, got "
                              f"{len(self.logit_bias)}", param="logit_bias")
        if not all(k.isascii() and k.isdigit() and len(k) <= 10 for k in self.logit_bias):
            # never echo the key: it is whatever the client sent
            raise bad_request("logit_bias keys must be token ids (non-negative integers)",
                              param="logit_bias")
        return tuple((int(k), v) for k, v in self.logit_bias.items())


def for_choice(sampling: SamplingParams, index: int) -> SamplingParams:
    """Choice ``index`` of n: same parameters, and seed + index so seeded choices differ."""
    if index == 0 or sampling.seed is None:
        return sampling
    seed = (sampling.seed + index - INT64_MIN) % 2**64 + INT64_MIN
    return msgspec.structs.replace(sampling, seed=seed)


class ChatCompletionRequest(_GenerationRequest):
    """POST /v1/chat/completions."""

    messages: list[Message]
    logprobs: bool | None = None
    top_logprobs: TopCount | None = None
    # extra variables of the chat template, e.g. {"enable_thinking": false} (as vLLM)
    chat_template_kwargs: dict[str, Any] | None = None

    def template_kwargs_json(self) -> str | None:
        """``chat_template_kwargs`` as the JSON text the tokenizer process reads."""
        return template_kwargs_json(self.chat_template_kwargs)

    def top_count(self) -> int | None:
        if not self.logprobs:
            if self.top_logprobs is not None:
                raise bad_request("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
            return None
        return self.top_logprobs or 0

    def chat_messages(self) -> tuple[ChatMessage, ...]:
        """The conversation as minisgl ChatMessages (content parts joined by newlines)."""
        return chat_messages(self.messages)


def template_kwargs_json(kwargs: dict[str, Any] | None) -> str | None:
    """A request's ``chat_template_kwargs`` as JSON text (None when absent or empty)."""
    return json.dumps(kwargs, ensure_ascii=False) if kwargs else None


Prompt = str | tuple[int, ...]


class CompletionRequest(_GenerationRequest):
    """POST /v1/completions."""

    prompt: Any
    logprobs: TopCount | None = None  # the legacy form: how many top alternatives per token
    echo: bool | None = None  # the prompt (and with logprobs its logprobs) before the output

    def top_count(self) -> int | None:
        return self.logprobs

    def prompt_count(self) -> int | None:
        # echo always takes the prompt's entries: they carry token-id prompts' text too
        echoed = [self.logprobs or 0] if self.echo else []
        counts = [k for k in (self.prompt_logprobs, *echoed) if k is not None]
        return max(counts) if counts else None

    @property
    def echo_only(self) -> bool:
        """``echo`` with ``max_tokens: 0``: the prompt is scored, nothing is generated."""
        return bool(self.echo) and self.max_tokens == 0

    def sampling(self) -> SamplingParams:
        if self.echo_only:
            # the engine always samples a token: one is taken and left out of the answer
            return super(CompletionRequest, self.model_copy(update={"max_tokens": 1})).sampling()
        return super().sampling()

    def prompts(self) -> list[Prompt]:
        """A string, a list of strings, token ids, or a list of token-id lists -> prompts."""
        p = self.prompt
        if isinstance(p, str):
            items: list[Prompt] = [p]
        elif isinstance(p, list) and p and all(_is_token(t) for t in p):
            items = [tuple(p)]
        elif isinstance(p, list) and p and all(isinstance(s, str) for s in p):
            items = list(p)
        elif isinstance(p, list) and p and all(
                isinstance(ids, list) and all(_is_token(t) for t in ids) for ids in p):
            items = [tuple(ids) for ids in p]
        else:
            raise bad_request("'prompt' must be a string, a list of strings, a list of token ids "
                              f"(0..{MAX_TOKEN_ID}) or a list of token-id lists", param="prompt")
        if len(items) > MAX_PROMPTS:
            raise bad_request(f"at most {MAX_PROMPTS} prompts are allowed, got {len(items)}",
                              param="prompt")
        if any(len(item) == 0 for item in items):
            raise bad_request("prompts must not be empty", param="prompt")
        if len(items) * self.choices_per_prompt > MAX_CHOICES:
            raise bad_request(f"prompts x n must be at most {MAX_CHOICES}", param="n")
        return items


def _is_token(t: Any) -> bool:
    return type(t) is int and 0 <= t <= MAX_TOKEN_ID


