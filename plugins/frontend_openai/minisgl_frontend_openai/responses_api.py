"""OpenAI's Responses API: ``POST /v1/responses`` runs chat's engine request (same messages,
tools, grammar, sampling, abort on disconnect and metrics), answered whole or as Responses
events; ``GET`` / ``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` read
the store ``previous_response_id`` chains are built from."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from minisgl_core.api import GenerateRequest
from minisgl_frontend_openai.answering import run_generation
from minisgl_frontend_openai.body import parse
from minisgl_frontend_openai.context import context_of
from minisgl_frontend_openai.errors import APIError, bad_request
from minisgl_frontend_openai.generation import Generation
from minisgl_frontend_openai.response_store import ResponseStore, StoredResponse
from minisgl_frontend_openai.responses_input import (
    Item,
    ResponsesRequest,
    engine_plan,
    input_items,
    new_id,
)
from minisgl_frontend_openai.responses_stream import Event, ResponseEvents

log = logging.getLogger("minisgl_frontend_openai.app")
MAX_LIST = 100  # input items per page


def skeleton(req: ResponsesRequest, response_id: str, model: str, created: int
             ) -> dict[str, Any]:
    """The response object's fields that echo the request (what the SDK's ``Response`` reads)."""
    return {"id": response_id, "object": "response", "created_at": created, "model": model,
            "status": "in_progress", "error": None, "incomplete_details": None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "metadata": req.metadata or {},
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id, "reasoning": req.reasoning,
            "store": req.store is not False, "temperature": req.temperature, "top_p": req.top_p,
            "text": {"format": (req.text or {}).get("format") or {"type": "text"}},
            "tool_choice": req.tool_choice or "auto", "tools": req.tools or [],
            "truncation": "disabled", "user": req.user, "background": False, "output": [],
            "usage": None}


def store_of(request: Request) -> ResponseStore:
    """The app's response store."""
    store: ResponseStore = request.app.state.response_store
    return store


async def create_response(request: Request) -> Response:
    ctx = context_of(request)
    store = store_of(request)
    req = parse(ResponsesRequest, await request.body())
    model = ctx.check_model(req.model)
    items = input_items(req)
    earlier: list[Item] = []
    if req.previous_response_id is not None:
        previous = await asyncio.to_thread(store.get, req.previous_response_id)
        if previous is None:
            raise bad_request(f"Previous response with id '{req.previous_response_id[:100]}' "
                              "not found", param="previous_response_id",
                              code="previous_response_not_found")
        earlier = previous.conversation
    plan = engine_plan(req, [*earlier, *items])
    now = time.time()
    response_id = new_id("resp")
    engine_request = GenerateRequest(
        request_id=response_id, owner=ctx.client.frontend_id, sampling=plan.sampling,
        messages=plan.messages, arrival_time=now,
        tools=plan.tools.template_json if plan.tools else None,
        chat_template_kwargs=plan.template_kwargs)
    answer = ResponseEvents(skeleton(req, response_id, model, int(now)), plan.tools)

    async def keep(final: dict[str, Any]) -> None:
        if req.store is False:
            return
        try:  # the chain so far: the next turn's prompt starts with it
            await asyncio.to_thread(store.put, final, items, [*earlier, *items,
                                                               *final["output"]])
        except (sqlite3.Error, OSError) as exc:  # the answer stands; only its chain is lost
            log.warning("could not store response %s in %s: %s", final["id"], store.path, exc)

    final = await run_generation(
        ctx, request, [engine_request], collect=lambda gen: _collect(gen, answer),
        grammar_param=plan.grammar_param,
        input_param="input",  # chat's messages / prompt: here they are the input
        stream=(lambda gen: _events(gen, answer, keep)) if req.stream else None)
    if isinstance(final, Response):  # the stream, or the client left
        return final
    await keep(final)
    return JSONResponse(final)


async def _collect(gen: Generation, answer: ResponseEvents) -> dict[str, Any]:
    async for _, delta in gen.events():
        answer.feed(delta)
    assert answer.final is not None
    return answer.final


def _frame(event: Event) -> bytes:
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


async def _events(gen: Generation, answer: ResponseEvents,
                  keep: Callable[[dict[str, Any]], Awaitable[None]]) -> AsyncIterator[bytes]:
    try:
        for event in answer.opening():
            yield _frame(event)
        async for _, delta in gen.events():
            for event in answer.feed(delta):
                yield _frame(event)
        if answer.final is not None:
            await keep(answer.final)
    except Exception as exc:  # noqa: BLE001 - the status line is gone: report it in-band
        err = exc if isinstance(exc, APIError) else APIError(
            500, f"internal error: {type(exc).__name__}", type="server_error")
        if not isinstance(exc, APIError):
            log.exception("responses stream failed")
        # OpenAI's error event; its "error" envelope makes the SDK raise, as for chat streams
        yield _frame(answer.numbered([{"type": "error", "code": err.code,
                                       "message": err.message, "param": err.param,
                                       **err.envelope()}])[0])


async def _stored(request: Request) -> StoredResponse:
    response_id = request.path_params["response_id"]
    found = await asyncio.to_thread(store_of(request).get, response_id)
    if found is None:
        raise APIError(404, f"No response found with id '{response_id[:100]}'",
                       param="response_id", code="response_not_found")
    return found


async def get_response(request: Request) -> Response:
    return JSONResponse((await _stored(request)).response)


async def delete_response(request: Request) -> Response:
    response_id = request.path_params["response_id"]
    if not await asyncio.to_thread(store_of(request).delete, response_id):
        raise APIError(404, f"No response found with id '{response_id[:100]}'",
                       param="response_id", code="response_not_found")
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


async def list_input_items(request: Request) -> Response:
    items = (await _stored(request)).input_items
    query = request.query_params
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad_request("'order' must be asc or desc", param="order")
    limit_text = query.get("limit", "20")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIST:
        raise bad_request(f"'limit' must be an integer in 1..{MAX_LIST}", param="limit")
    if order == "desc":
        items = items[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1:] if after in ids else []
    page = items[:int(limit_text)]
    return JSONResponse({"object": "list", "data": page,
                         "first_id": page[0]["id"] if page else None,
                         "last_id": page[-1]["id"] if page else None,
                         "has_more": len(items) > len(page)})


def add_responses_routes(app: FastAPI, store: ResponseStore) -> None:
    """Register the Responses API routes, answering from ``store``."""
    app.state.response_store = store
    app.add_api_route("/v1/responses", create_response, methods=["POST"])
    app.add_api_route("/v1/responses/{response_id}", get_response, methods=["GET"])
    app.add_api_route("/v1/responses/{response_id}", delete_response, methods=["DELETE"])
    app.add_api_route("/v1/responses/{response_id}/input_items", list_input_items,
                      methods=["GET"])
