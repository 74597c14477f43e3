"""OpenAIFrontend: the ``openai`` frontend, serving the FastAPI app with uvicorn.

The launcher owns signals, so uvicorn never installs handlers; it owns logging too, so uvicorn's
logging config is not applied. ``serve()`` runs until ``shutdown()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from minisgl_core.api import EngineClient, check_port, checked_options, reasoning_syntax
from minisgl_frontend_openai.app import DEFAULT_MAX_BODY_BYTES, build_app, fail_in_flight
from minisgl_frontend_openai.response_store import (
    DEFAULT_MAX_AGE_S,
    DEFAULT_MAX_RESPONSES,
    ResponseStore,
)
from minisgl_frontend_openai.ui import add_ui

if TYPE_CHECKING:
    from minisgl_core.api import LaunchConfig

log = logging.getLogger("minisgl.frontend.openai")

# the [frontends.openai] table: every option and its default (--host, --port and --api-key
# write host, port and api_key)
OPTIONS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8000,  # 0: any free port
    "api_key": None,  # set: every route but /health, /metrics and the page needs it
    "max_body_bytes": DEFAULT_MAX_BODY_BYTES,  # 413 above this
    "model_aliases": [],  # extra names accepted (and listed) as the served model
    # True: a request naming any model is answered by the served one (mini-sglang's and
    # SGLang's way; `python -m minisgl` sets it); False: an unknown name is a 404 (vLLM's way)
    "accept_any_model": False,
    "metrics_require_key": False,  # True: /metrics needs the API key too
    "sglang_metrics": False,  # True: /metrics has SGLang's gauge names too (docs/scale-out.md)
    # where /v1/responses keeps stored answers (None: the cache directory's responses/), and
    # how many / how long (seconds) it keeps them
    "responses_store_dir": None,
    "responses_store_max": DEFAULT_MAX_RESPONSES,
    "responses_store_max_age_s": DEFAULT_MAX_AGE_S,
    "graceful_shutdown_s": 5.0,  # how long shutdown lets in-flight responses finish
    "timeout_keep_alive_s": 5,
    "access_log": False,
    "log_level": "warning",
    "http": "auto",  # uvicorn's HTTP implementation: auto, h11, httptools
}


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options with their defaults; ValueError naming the bad one (``minisgl launch`` calls
    this before any worker starts)."""
    checked = checked_options("[frontends.openai]", options, OPTIONS)
    check_port("[frontends.openai]", checked["port"])
    if not checked["host"]:
        raise ValueError("[frontends.openai] host must not be empty")
    if checked["max_body_bytes"] < 1:
        raise ValueError("[frontends.openai] max_body_bytes must be at least 1")
    return checked


def _response_store(options: Mapping[str, Any]) -> ResponseStore:
    directory = options["responses_store_dir"]
    return ResponseStore(Path(directory).expanduser() if directory else None,
                         max_responses=int(options["responses_store_max"]),
                         max_age_s=float(options["responses_store_max_age_s"]))


def _reasoning_end(config: LaunchConfig) -> str | None:
    """What ends thinking under the service's ``--reasoning-parser`` (None: it has none)."""
    name = getattr(config, "reasoning_parser", None)
    return reasoning_syntax(name).end if name else None


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the launcher owns SIGINT/SIGTERM


class OpenAIFrontend:
    """Serves the OpenAI API for ``client`` on its ``host``:``port`` options (0 = any port)."""

    check_options = staticmethod(check_options)

    def __init__(self, client: EngineClient, config: LaunchConfig,
                 options: Mapping[str, Any]) -> None:
        self.options = check_options(options)
        self.client = client
        self.host: str = self.options["host"]
        self._requested_port: int = self.options["port"]
        self.api_key: str | None = self.options["api_key"] or None
        self.app = build_app(client, api_key=self.api_key,
                             max_body_bytes=int(self.options["max_body_bytes"]),
                             model_aliases=self.options["model_aliases"],
                             metrics_require_key=bool(self.options["metrics_require_key"]),
                             served_model_names=tuple(getattr(config, "served_model_name", ())),
                             sglang_metrics=bool(self.options["sglang_metrics"]),
                             model_path=getattr(config, "model", None),
                             response_store=_response_store(self.options),
                             accept_any_model=bool(self.options["accept_any_model"]),
                             reasoning_end=_reasoning_end(config))
        add_ui(self.app, client, config)  # GET / : the chat playground and engine dashboard
        self._socket: socket.socket | None = None
        self._server: _Server | None = None
        self._stop_requested = False
        self._started = asyncio.Event()
        self._stopped = asyncio.Event()

    def bind(self) -> int:
        """Bind the listening socket now (idempotent) and return its port."""
        if self._socket is None:
            family, kind, proto, _, addr = socket.getaddrinfo(
                self.host, self._requested_port, type=socket.SOCK_STREAM,
                flags=socket.AI_PASSIVE)[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(addr)
            except OSError:
                sock.close()
                raise
            sock.listen(2048)  # listening now: a second bind of this port fails at once
            sock.set_inheritable(False)
            self._socket = sock
        return int(self._socket.getsockname()[1])

    @property
    def port(self) -> int:
        """The bound port (binds first if needed)."""
        return self.bind()

    @property
    def url(self) -> str:
        """The base URL of the API, e.g. ``http://127.0.0.1:8000/v1``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    @property
    def metrics(self) -> Any:
        """The FrontendMetrics behind /metrics."""
        return self.app.state.metrics

    async def wait_started(self) -> bool:
        """Wait until the server accepts connections (True) or ``serve`` ended first (False)."""
        waiters = [asyncio.ensure_future(self._started.wait()),
                   asyncio.ensure_future(self._stopped.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return self._started.is_set()

    async def serve(self) -> None:
        """Serve until ``shutdown()``; a port already in use raises OSError."""
        watcher: asyncio.Future[None] | None = None
        try:
            if self._stop_requested:  # shut down before it ever started
                return
            self.bind()
            sock = self._socket
            assert sock is not None
            opts = self.options
            config = uvicorn.Config(
                self.app, log_config=None, lifespan="off", access_log=bool(opts["access_log"]),
                log_level=str(opts["log_level"]), http=str(opts["http"]),
                timeout_keep_alive=int(opts["timeout_keep_alive_s"]),
                timeout_graceful_shutdown=math.ceil(float(opts["graceful_shutdown_s"])))
            self._server = server = _Server(config)
            watcher = asyncio.ensure_future(self._watch_started(server))
            await server.serve(sockets=[sock])
        finally:
            if watcher is not None:
                watcher.cancel()
            self._socket = None  # uvicorn closed it
            self._stopped.set()

    async def shutdown(self) -> None:
        """Stop accepting requests, let in-flight ones end (bounded), make ``serve`` return."""
        self._stop_requested = True
        if self._server is None:
            if self._socket is not None:
                self._socket.close()
                self._socket = None
            return
        # streams end with an error event, not a torn connection, and then the server drains
        fail_in_flight(self.app, "the server is shutting down")
        self._server.should_exit = True
        await self._stopped.wait()

    async def _watch_started(self, server: _Server) -> None:
        while not server.started:
            await asyncio.sleep(0.01)
        self._started.set()
        log.info("OpenAI frontend listening on %s", self.url)
        if self._stop_requested:  # shutdown() raced with startup: make sure it is seen
            server.should_exit = True
