"""POST /tokenize and /detokenize in vLLM's shapes, with the model's own tokenizer and template.

The tokenizer is loaded on first use (in a worker thread, so the event loop keeps serving) with
the same TokenizerRole the tokenizer process runs, so ``/tokenize`` of chat messages shows exactly
the prompt ids a chat completion would send to the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from minisgl_core.wire.schema import GenerateRequest
from minisgl_frontend_openai.body import Strict, parse
from minisgl_frontend_openai.errors import APIError, bad_request
from minisgl_frontend_openai.messages import Message, chat_messages
from minisgl_frontend_openai.schemas import MAX_TOKEN_ID, template_kwargs_json
from minisgl_frontend_openai.tools import tool_request

MAX_DETOKENIZE = 1 << 20  # ids in one /detokenize call (the body limit caps it sooner)


class TokenizeRequest(Strict):
    """vLLM's tokenize body: ``prompt`` (a completion) or ``messages`` (a chat), not both."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_special_tokens: bool | None = None  # default: True for a prompt, False for messages
    add_generation_prompt: bool = True
    return_token_strs: bool = False
    tools: list[Any] | None = None  # rendered as a chat completion with these tools would be
    chat_template_kwargs: dict[str, Any] | None = None  # as a chat completion's

    def check(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise bad_request("send exactly one of 'prompt' or 'messages'", param="prompt")


class DetokenizeRequest(Strict):
    """vLLM's detokenize body."""

    model: str | None = None
    tokens: list[int] = Field(max_length=MAX_DETOKENIZE)

    def check(self) -> None:
        bad = next((t for t in self.tokens if not 0 <= t <= MAX_TOKEN_ID), None)
        if bad is not None:
            raise bad_request(f"token id {bad} is not a token id", param="tokens")


class LazyTokenizer:
    """Builds the TokenizerRole once, off the event loop; every caller awaits the same one."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._role: Any = None
        self._lock = asyncio.Lock()

    async def get(self) -> Any:
        """The loaded TokenizerRole (503 when it cannot be loaded)."""
        async with self._lock:
            if self._role is None:
                try:
                    self._role = await asyncio.to_thread(self._load)
                except Exception as exc:  # noqa: BLE001 - a missing tokenizer is not a crash
                    raise APIError(503, f"the tokenizer is unavailable: {type(exc).__name__}",
                                   type="server_error", code="tokenizer_unavailable") from None
            return self._role


def add_tokenize_routes(app: FastAPI, tokenizer: LazyTokenizer, *, owner: str,
                        check_model: Callable[[str | None], str],
                        max_context: Callable[[], int]) -> None:
    """Register POST /tokenize and /detokenize on ``app`` (vLLM serves them unversioned)."""

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        req = parse(TokenizeRequest, await request.body())
        check_model(req.model)
        role = await tokenizer.get()
        ids = await asyncio.to_thread(_encode, role, req, owner)
        body: dict[str, Any] = {"count": len(ids), "max_model_len": max_context(),
                                "tokens": list(ids), "token_strs": None}
        if req.return_token_strs:
            body["token_strs"] = role.tokenizer.convert_ids_to_tokens(list(ids))
        return JSONResponse(body)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        req = parse(DetokenizeRequest, await request.body())
        check_model(req.model)
        role = await tokenizer.get()
        if any(t >= role.vocab_size for t in req.tokens):
            raise bad_request(f"token ids must be below the vocabulary size ({role.vocab_size})",
                              param="tokens")
        text = await asyncio.to_thread(role.tokenizer.decode, req.tokens)
        return JSONResponse({"prompt": text})


def _encode(role: Any, req: TokenizeRequest, owner: str) -> tuple[int, ...]:
    from minisgl_core.text.tokenize import RequestError
    from minisgl_core.wire.schema import SamplingParams

    try:
        if req.prompt is not None:
            if not req.prompt:
                raise bad_request("the prompt is empty", param="prompt")
            add = True if req.add_special_tokens is None else req.add_special_tokens
            return tuple(role.tokenizer.encode(req.prompt, add_special_tokens=add))
        tools = tool_request({"tools": req.tools})
        gen = GenerateRequest(request_id="tokenize", owner=owner, sampling=SamplingParams(),
                              messages=chat_messages(req.messages or []),
                              tools=tools.template_json if tools else None,
                              chat_template_kwargs=template_kwargs_json(req.chat_template_kwargs))
        ids = role.encode(gen, add_generation_prompt=req.add_generation_prompt)
        if req.add_special_tokens and role.tokenizer.bos_token_id is not None:
            ids = (role.tokenizer.bos_token_id, *ids)
        return tuple(ids)
    except RequestError as exc:
        raise bad_request(exc.info.message, param=exc.info.param, code=exc.info.code) from None
