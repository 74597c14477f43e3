"""POST /tokenize and /detokenize in vLLM's shapes, answered by the service's tokenizer role.

The body's shape is checked here; the ids come from the tokenizer process through
``EngineClient.tokenize`` (the same role, tokenizer and chat template a generation goes through),
so ``/tokenize`` of chat messages shows exactly the prompt ids a chat completion would send, and
this process loads no tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from minisgl_core.api import EngineClient, GenerateRequest, SamplingParams, TokenizerReply
from minisgl_frontend_openai.body import Strict, parse
from minisgl_frontend_openai.errors import bad_request, from_error_info
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
        if self.prompt is not None and not self.prompt:
            raise bad_request("the prompt is empty", param="prompt")

    def engine_request(self, owner: str) -> GenerateRequest:
        """The generation request whose prompt ids are asked for."""
        if self.prompt is not None:
            return GenerateRequest(request_id="tokenize", owner=owner, sampling=SamplingParams(),
                                   prompt=self.prompt)
        tools = tool_request({"tools": self.tools})
        return GenerateRequest(request_id="tokenize", owner=owner, sampling=SamplingParams(),
                               messages=chat_messages(self.messages or []),
                               tools=tools.template_json if tools else None,
                               chat_template_kwargs=template_kwargs_json(
                                   self.chat_template_kwargs))


class DetokenizeRequest(Strict):
    """vLLM's detokenize body."""

    model: str | None = None
    tokens: list[int] = Field(max_length=MAX_DETOKENIZE)

    def check(self) -> None:
        bad = next((t for t in self.tokens if not 0 <= t <= MAX_TOKEN_ID), None)
        if bad is not None:
            raise bad_request(f"token id {bad} is not a token id", param="tokens")


def _answered(reply: TokenizerReply) -> TokenizerReply:
    if reply.error is not None:
        raise from_error_info(reply.error)
    return reply


def add_tokenize_routes(app: FastAPI, client: EngineClient, *,
                        check_model: Callable[[str | None], str]) -> None:
    """Register POST /tokenize and /detokenize on ``app`` (vLLM serves them unversioned)."""

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Response:
        req = parse(TokenizeRequest, await request.body())
        check_model(req.model)
        reply = _answered(await client.tokenize(
            req.engine_request(client.frontend_id), add_special_tokens=req.add_special_tokens,
            add_generation_prompt=req.add_generation_prompt, token_strs=req.return_token_strs))
        strs = list(reply.token_strs) if reply.token_strs is not None else None
        return JSONResponse({"count": len(reply.token_ids), "max_model_len": client.max_context,
                             "tokens": list(reply.token_ids), "token_strs": strs})

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Response:
        req = parse(DetokenizeRequest, await request.body())
        check_model(req.model)
        reply = _answered(await client.detokenize(req.tokens))
        return JSONResponse({"prompt": reply.text})
