"""``minisgl chat``: a conversation in the terminal, streamed from a service or an in-process
engine. Light on purpose: torch is imported only with ``--offline``, fastapi never."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Annotated, Any, TextIO

import typer

DEFAULT_URL = "http://127.0.0.1:8000"
HELP = "/reset starts over, /quit or Ctrl-D leaves, Ctrl-C stops an answer"


def add_commands(app: typer.Typer) -> None:
    """Add ``chat`` to the ``minisgl`` CLI."""
    app.command("chat")(chat)


def chat(
    url: Annotated[str, typer.Option(help="The service (its /v1 may be included).")] = DEFAULT_URL,
    api_key: Annotated[str | None, typer.Option(
        envvar="MINISGL_API_KEY", help="Bearer token, if the service needs one.")] = None,
    model: Annotated[str | None, typer.Option(
        help="Model name to ask for (default: the served one); with --offline, the model to "
             "load.")] = None,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Run the engine in this process instead of calling a service.")] = False,
    system: Annotated[str | None, typer.Option(help="System prompt.")] = None,
    temperature: Annotated[float | None, typer.Option(min=0.0, help="0 = greedy.")] = None,
    top_p: Annotated[float | None, typer.Option(min=0.0, max=1.0)] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Per answer.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
) -> None:
    """Chat with a model in the terminal; answers stream as they are generated.

    One message per line on stdin (a pipe works too); token counts and speed go to stderr.
    """
    from minisgl_frontend_openai.chat_backends import (
        ChatError,
        HttpBackend,
        OfflineBackend,
        Params,
    )

    params = Params(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
    try:
        backend: Any = (OfflineBackend(model, params) if offline
                        else HttpBackend(url, api_key, model, params))
    except ChatError as exc:
        typer.echo(f"minisgl chat: {exc}", err=True)
        raise typer.Exit(1) from None
    interactive = sys.stdin.isatty()
    if interactive:
        typer.echo(f"minisgl chat with {backend.describe()} ({HELP})", err=True)
    failed = run(backend, system, sys.stdin, sys.stdout, sys.stderr, interactive=interactive,
                 errors=(ChatError,))
    raise typer.Exit(1 if failed else 0)


class Interrupt:
    """Ctrl-C (SIGINT) during an answer stops that answer; anywhere else it ends the chat.

    The handler only sets a flag while an answer runs: raising there could land the
    KeyboardInterrupt in a finaliser or a library's cleanup, where Python drops it. The
    streams look at the flag themselves, at every moment of an answer.
    """

    def __init__(self) -> None:
        self._answering = False
        self._requested = False

    def requested(self) -> bool:
        """True once Ctrl-C came during the current answer."""
        return self._requested

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT for the block (main thread only; elsewhere Python's default stays)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """The block is one answer: Ctrl-C inside it stops the answer, not the program."""
        self._requested, self._answering = False, True
        try:
            yield
        finally:
            self._answering = False

    def _handle(self, signum: int, frame: object) -> None:
        if not self._answering:
            raise KeyboardInterrupt
        self._requested = True


def run(backend: Any, system: str | None, stdin: TextIO, out: TextIO, err: TextIO, *,
        interactive: bool, errors: tuple[type[Exception], ...]) -> bool:
    """The conversation loop; returns True if any turn failed."""
    base = [{"role": "system", "content": system}] if system else []
    messages = list(base)
    failed = False
    interrupt = Interrupt()
    with interrupt.installed():
        try:
            while True:
                if interactive:
                    out.write("\n> ")
                    out.flush()
                line = stdin.readline()
                if not line:
                    break
                text = line.strip()
                if not text:
                    continue
                if text in ("/quit", "/exit"):
                    break
                if text == "/reset":
                    messages = list(base)
                    err.write("[a new conversation]\n")
                    continue
                messages.append({"role": "user", "content": text})
                answer, ok = turn(backend, messages, out, err, errors, interrupt)
                failed |= not ok
                if ok or answer:
                    messages.append({"role": "assistant", "content": answer})
                else:
                    messages.pop()  # nothing came back: the question is not in the conversation
        except KeyboardInterrupt:  # at the prompt: leave, as a shell does
            out.write("\n")
    return failed


def turn(backend: Any, messages: list[dict[str, str]], out: TextIO, err: TextIO,
         errors: tuple[type[Exception], ...], interrupt: Interrupt) -> tuple[str, bool]:
    """Stream one answer to ``out``; returns its text and whether it ended without an error."""
    pieces: list[str] = []
    start = time.monotonic()
    first: float | None = None
    ok = True
    with interrupt.answering():
        stream = backend.stream(messages, interrupt.requested)
        try:
            for piece in stream:
                if first is None:
                    first = time.monotonic()
                pieces.append(piece)
                out.write(piece)
                out.flush()
        except errors as exc:
            ok = False
            out.write("\n" if pieces else "")
            err.write(f"minisgl chat: {exc}\n")
        finally:
            stream.close()  # a stopped answer is aborted where it runs
        stopped = interrupt.requested()
    out.write("\n")
    out.flush()
    if ok:
        err.write(summary(backend.outcome, len(pieces), start, first, time.monotonic(),
                          stopped) + "\n")
    err.flush()
    return "".join(pieces), ok


def summary(outcome: Any, pieces: int, start: float, first: float | None, end: float,
            stopped: bool) -> str:
    """``[12 tokens, TTFT 80 ms, 45.1 tokens/s, length]`` (tokens as counted by the engine)."""
    tokens = outcome.completion_tokens
    parts = [f"{tokens} tokens" if tokens is not None else f">= {pieces} tokens"]
    if first is not None:
        parts.append(f"TTFT {(first - start) * 1000:.0f} ms")
        count = tokens if tokens is not None else pieces
        if count > 1 and end > first:
            parts.append(f"{(count - 1) / (end - first):.1f} tokens/s")
    parts.append("stopped" if stopped else (outcome.finish_reason or "?"))
    return "[" + ", ".join(parts) + "]"
