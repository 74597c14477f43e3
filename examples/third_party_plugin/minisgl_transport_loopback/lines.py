"""``lines``: a frontend on a plain TCP socket: one prompt per line in, one JSON line out.

Each answer is a JSON string (the whole completion, greedy), or ``{"error": ...}``; the
connection stays open for the next prompt. Options (``[frontends.lines]``, checked before the
launch starts anything): ``port`` (0: any free one), ``host`` (127.0.0.1; ``--host`` writes it)
and ``max_tokens`` (32). It has no authentication, so it refuses an ``api_key``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from minisgl_core.api import (
    EngineClient,
    GenerateRequest,
    LaunchConfig,
    SamplingParams,
    check_port,
    checked_options,
)

log = logging.getLogger(__name__)
MAX_LINE = 64 * 1024
OPTIONS: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "api_key": None, "max_tokens": 32}


def check_options(table: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[frontends.lines]`` options with their defaults; ValueError for a bad one."""
    options = checked_options("[frontends.lines]", table, OPTIONS)
    check_port("[frontends.lines]", options["port"])
    if options["api_key"]:
        raise ValueError("the lines frontend has no authentication: it cannot serve an api_key")
    if options["max_tokens"] < 1:
        raise ValueError("[frontends.lines] max_tokens must be at least 1")
    return options


class LinesFrontend:
    """Satisfies ``minisgl_core.api.Frontend``; built as ``factory(client, config, options)``
    by the launcher."""

    check_options = staticmethod(check_options)

    def __init__(self, client: EngineClient, config: LaunchConfig,
                 options: Mapping[str, Any]) -> None:
        checked = check_options(options)
        self.client = client
        self.host: str = checked["host"]
        self.port: int = checked["port"]
        self.max_tokens: int = checked["max_tokens"]
        self._server: asyncio.Server | None = None
        self._stopped: asyncio.Event | None = None

    async def serve(self) -> None:
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._connection, self.host, self.port,
                                                  limit=MAX_LINE)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("lines frontend on tcp://%s:%d", self.host, self.port)
        await self._stopped.wait()

    async def shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._stopped is not None:
            self._stopped.set()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                prompt = line.decode("utf-8", "replace").strip()
                if prompt:
                    writer.write(json.dumps(await self._answer(prompt)).encode() + b"\n")
                    await writer.drain()
        except (ConnectionError, ValueError):  # a reset, or a line longer than MAX_LINE
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, prompt: str) -> str | dict[str, str]:
        request = GenerateRequest(request_id=uuid.uuid4().hex, owner="", prompt=prompt,
                                  sampling=SamplingParams(max_tokens=self.max_tokens,
                                                          temperature=0.0))
        pieces = []
        try:
            async for delta in self.client.generate(request):
                if delta.error is not None:
                    return {"error": delta.error.message}
                pieces.append(delta.text)
        except Exception as exc:  # noqa: BLE001 - overloaded or starting: tell the client
            return {"error": str(exc)}
        return "".join(pieces)
