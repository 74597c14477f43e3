"""GET /get_load, /server_info and /model_info: what sgl-model-gateway (``sglang-router``) reads.

The shapes follow SGLang's own server, so the router needs no special case for minisgl:
``/get_load`` is a JSON array with one entry per data-parallel rank (``--dp N``: N), each with
``dp_rank``, ``num_reqs``, ``num_waiting_reqs`` and ``num_tokens`` (KV tokens held by requests);
``/server_info`` (and its older name ``/get_server_info``) names the model and the limits;
``/model_info`` (``/get_model_info``) the model path and that it generates. docs/scale-out.md
gives the exact meanings. /metrics counts the GETs of /get_load
(``minisgl_get_load_requests_total``), so an operator can see that a router polls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from minisgl_core.api import __version__
from minisgl_frontend_openai.context import context_of


def _num(engine: Mapping[str, float], key: str) -> float:
    value = engine.get(key, math.nan)
    return 0.0 if math.isnan(value) else float(value)


def kv_tokens_used(engine: Mapping[str, float]) -> int:
    """Tokens of KV cache held by requests now: pages not allocatable x tokens per page."""
    used_pages = max(_num(engine, "kv_pages_total") - _num(engine, "kv_pages_free"), 0.0)
    return int(used_pages * max(_num(engine, "kv_page_size"), 1.0))


def replicas(engine: Mapping[str, float]) -> list[dict[str, float]]:
    """Each scheduler replica's values (``name{dp_rank="i"}`` under --dp N), by dp_rank; the
    totals as the one replica when there are no labelled values."""
    ranks: dict[int, dict[str, float]] = {}
    for key, value in engine.items():
        base, _, label = key.partition('{dp_rank="')
        if label:
            ranks.setdefault(int(label.split('"')[0]), {})[base] = value
    return [ranks[r] for r in sorted(ranks)] or [dict(engine)]


def load_entries(engine: Mapping[str, float]) -> list[dict[str, int]]:
    """The /get_load body: one entry per data-parallel rank of this service."""
    out = []
    page_size = engine.get("kv_page_size", math.nan)
    for rank, values in enumerate(replicas(engine)):
        running = int(_num(values, "requests_running"))
        waiting = int(_num(values, "requests_waiting"))
        out.append({"dp_rank": rank, "num_reqs": running + waiting, "num_waiting_reqs": waiting,
                    "num_tokens": kv_tokens_used({**values, "kv_page_size": page_size})})
    return out


def _engine(request: Request) -> dict[str, float]:
    try:
        return context_of(request).client.metrics()
    except Exception:  # noqa: BLE001 - load and info must answer even when the engine cannot
        return {}


async def get_load(request: Request) -> Response:
    context_of(request).metrics.load_polls += 1
    return JSONResponse(load_entries(_engine(request)))


async def server_info(request: Request) -> Response:
    ctx = context_of(request)
    engine = _engine(request)
    page_size = int(max(_num(engine, "kv_page_size"), 1.0))
    name = ctx.served_names()[0]
    return JSONResponse({
        "model_id": name, "model_path": request.app.state.model_path or ctx.client.model_name,
        "served_model_name": name, "dp_size": len(replicas(engine)), "version": __version__,
        "max_total_tokens": int(_num(engine, "kv_pages_total")) * page_size,
        "context_length": ctx.client.max_context, "page_size": page_size})


async def model_info(request: Request) -> Response:
    ctx = context_of(request)
    return JSONResponse({
        "model_path": request.app.state.model_path or ctx.client.model_name,
        "tokenizer_path": request.app.state.model_path or ctx.client.model_name,
        "served_model_name": ctx.served_names()[0], "is_generation": True,
        "max_context_length": ctx.client.max_context})


def add_router_routes(app: FastAPI, model_path: str | None = None) -> None:
    """Register the routes; ``model_path`` is what the service was launched with (``--model``)."""
    app.state.model_path = model_path
    app.add_api_route("/get_load", get_load, methods=["GET"])
    for path in ("/server_info", "/get_server_info"):
        app.add_api_route(path, server_info, methods=["GET"])
    for path in ("/model_info", "/get_model_info"):
        app.add_api_route(path, model_info, methods=["GET"])
