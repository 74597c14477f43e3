"""The web page (chat playground and live engine dashboard) and the two JSON endpoints it reads.

``GET /`` and ``GET /ui`` serve one HTML document assembled once from the files in ``static/``
(styles and scripts inlined, so the page is one request and needs nothing from the internet).
They are the only paths open without the API key: the page asks for the key and sends it as a
bearer token to ``/v1/engine/info``, ``/v1/engine/stats`` and the chat API like any client.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import time
from importlib import resources
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from minisgl_core.api import EngineClient, __version__
from minisgl_frontend_openai.engine_stats import StatsHistory, current, replica_rows
from minisgl_frontend_openai.errors import bad_request
from minisgl_frontend_openai.metrics import FrontendMetrics

UI_PATHS = ("/", "/ui")  # served without the API key: the page holds no data
_INCLUDE = re.compile(r"<(style|script) data-inline=\"([\w.-]+)\"></\1>")


def page() -> tuple[str, str]:
    """The HTML with every ``data-inline`` file inlined, and its Content-Security-Policy."""
    static = resources.files("minisgl_frontend_openai") / "static"
    hashes: list[str] = []

    def inline(m: re.Match[str]) -> str:
        tag, name = m.group(1), m.group(2)
        body = (static / name).read_text(encoding="utf-8")
        if tag == "script":  # only these exact scripts may run (no eval, no injected markup)
            digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
            hashes.append(f"'sha256-{digest}'")
        return f"<{tag}>{body}</{tag}>"

    html = _INCLUDE.sub(inline, (static / "index.html").read_text(encoding="utf-8"))
    csp = ("default-src 'none'; connect-src 'self'; img-src 'self' data:; "
           f"style-src 'unsafe-inline'; script-src {' '.join(hashes)}; base-uri 'none'; "
           "form-action 'none'; frame-ancestors 'none'")
    return html, csp


def served_info(client: EngineClient, config: Any) -> dict[str, Any]:
    """What is being served, as the dashboard shows it (``quantization`` only when configured)."""
    info: dict[str, Any] = {
        "model": client.model_name, "max_context": client.max_context,
        "version": __version__,
        "transport": getattr(config, "transport", None),
        "frontends": list(getattr(config, "frontends", None) or ("openai",)),  # None: us alone
        "tp": getattr(config, "tp", 1), "dp": getattr(config, "dp", 1),
        "dtype": getattr(config, "dtype", None), "device": getattr(config, "device", None),
        "cache": getattr(config, "cache", None),
    }
    quantization = getattr(config, "quantization", None)
    if quantization and quantization != "auto":  # what auto chose: in the engine's facts
        info["quantization"] = quantization
    # the engine's own facts (the client's ENGINE_FACTS): what "auto" resolved to and why, the
    # matmul kernels and their bytes, what the KV pages hold, the compiled step, the idle wait
    facts = getattr(client, "engine_facts", None) or {}
    for key in ("dtype", "quantization"):
        if key in facts:
            info[f"{key}_reason"] = ""  # said even when the engine gave no reason
    info.update(facts)
    return info


def add_ui(app: FastAPI, client: EngineClient, config: Any) -> None:
    """Add ``/``, ``/ui``, ``/v1/engine/info`` and ``/v1/engine/stats`` to ``app``."""
    html, csp = page()
    headers = {"Content-Security-Policy": csp, "Cache-Control": "no-cache",
               "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
    metrics: FrontendMetrics = app.state.metrics
    app.state.stats_history = history = StatsHistory()

    async def index() -> Response:
        return HTMLResponse(html, headers=headers)

    app.get("/", include_in_schema=False)(index)
    app.get("/ui", include_in_schema=False)(index)

    @app.get("/v1/engine/info")
    async def engine_info() -> Response:
        # the launcher's own listing, as `minisgl plugins` shows it
        return JSONResponse({**served_info(client, config), "plugins": client.plugins()})

    @app.get("/v1/engine/stats")
    async def engine_stats(request: Request) -> Response:
        since = _since(request.query_params.get("since"))
        engine = client.metrics()
        now = time.time()
        history.sample(now, engine, metrics)
        # msgspec: a page's first call gets the whole history, five times faster than json
        body = msgspec.json.encode({"time": now, "model": client.model_name,
                                    "healthy": client.healthy(),
                                    "current": current(engine, metrics),
                                    "replicas": replica_rows(engine),
                                    "samples": history.since(since)})
        return Response(body, media_type="application/json")


def _since(raw: str | None) -> float | None:
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise bad_request(f"Invalid value for 'since': {raw[:50]!r} is not a number",
                          param="since")
    return value
