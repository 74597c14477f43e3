"""The `minisgl grpc-generate` command; grpc is imported only when the command runs."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

DEFAULT_URL = "127.0.0.1:50051"


def add_commands(app: typer.Typer) -> None:
    """Add ``grpc-generate`` to the ``minisgl`` CLI."""
    app.command("grpc-generate")(grpc_generate)


def grpc_generate(
    prompt: Annotated[str, typer.Argument(help="the prompt text")],
    stream: Annotated[bool, typer.Option("--stream", help="print text as it arrives")] = False,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="tokens to generate")] = 64,
    temperature: Annotated[float | None, typer.Option(help="0 = greedy")] = None,
    url: Annotated[str, typer.Option(help="the gRPC server, host:port")] = DEFAULT_URL,
    model: Annotated[str, typer.Option(help="model name (empty = the served one)")] = "",
    timeout: Annotated[float, typer.Option(help="deadline in seconds")] = 300.0,
) -> None:
    """Generate text from a running minisgl gRPC frontend (minisgl.v1.Generator/Generate)."""
    import grpc

    from minisgl_frontend_grpc.client import build_request, stream_generate

    request = build_request(prompt, max_tokens=max_tokens, temperature=temperature, model=model)
    parts: list[str] = []
    try:
        for response in stream_generate(url, request, timeout=timeout):
            if stream:
                sys.stdout.write(response.text)
                sys.stdout.flush()
            else:
                parts.append(response.text)
            if response.finish_reason:
                if not stream:
                    sys.stdout.write("".join(parts))
                sys.stdout.write("\n")
                usage = response.usage
                print(f"[{response.finish_reason}; {usage.prompt_tokens} prompt + "
                      f"{usage.completion_tokens} completion tokens]", file=sys.stderr)
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        print(f"\nminisgl grpc-generate: {code}: {details}", file=sys.stderr)
        raise typer.Exit(1) from None
