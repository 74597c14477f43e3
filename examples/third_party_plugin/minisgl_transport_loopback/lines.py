"""``lines``: a frontend on a plain TCP socket: one prompt per line in, one JSON line out.

Each answer is a JSON string (the whole completion, greedy), or ``{"error": ...}``; the
connection stays open for the next prompt. Options (``[frontends.lines]``): ``port`` (0: any
free one), ``host`` (default: the launch's ``host``) and ``max_tokens`` (default 32).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from minisgl_core.api import EngineClient, GenerateRequest, LaunchConfig, SamplingParams

log = logging.getLogger(__name__)
MAX_LINE = 64 * 1024


class LinesFrontend:
    """Satisfies ``minisgl_core.api.Frontend``; built as ``factory(client, config, options)``
    by the launcher."""

    def __init__(self, client: EngineClient, config: LaunchConfig,
                 options: Mapping[str, Any]) -> None:
        self.client = client
        self.host = str(options.get("host", config.host))
        self.port = int(options.get("port", 0))
        self.max_tokens = int(options.get("max_tokens", 32))
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
