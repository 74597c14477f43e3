"""``minisgl bench structured``: structured outputs and tool calls on the default model, with the
official `openai` client.

Runs the 20 response schemas of structured_schemas.py through ``client.chat.completions.parse``
(every answer must parse into its pydantic model), the 20 tool sets with ``tool_choice`` set to
``required`` and to a named function (every call's arguments must validate against their schema,
checked with ``jsonschema``), and one ``auto`` round trip: the model calls a tool, gets a
``role: "tool"`` answer, and replies. Starts its own service unless ``--url`` is given.

    minisgl bench structured [--url http://127.0.0.1:8000] [--json]
"""

from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from minisgl_core.bench.options import extra_needed

if TYPE_CHECKING:
    from openai import OpenAI

MAX_TOKENS = 400


def parse_one(client: OpenAI, model: str, item: tuple[type, str]) -> dict[str, Any]:
    schema, prompt = item
    try:
        done = client.chat.completions.parse(
            model=model, messages=[{"role": "user", "content": prompt}], response_format=schema,
            max_completion_tokens=MAX_TOKENS, temperature=0)
        choice = done.choices[0]
        ok = choice.finish_reason == "stop" and isinstance(choice.message.parsed, schema)
        return {"schema": schema.__name__, "ok": ok, "tokens": done.usage.completion_tokens,
                "answer": choice.message.content}
    except Exception as exc:  # noqa: BLE001 - a failure is a result here
        return {"schema": schema.__name__, "ok": False, "error": f"{type(exc).__name__}: {exc}"}


def call_one(client: OpenAI, model: str, tools: list[dict[str, Any]], prompt: str,
             choice: Any, parallel: bool) -> dict[str, Any]:
    import jsonschema

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    label = choice if isinstance(choice, str) else choice["function"]["name"]
    try:
        done = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], tools=tools,
            tool_choice=choice, max_tokens=MAX_TOKENS, temperature=0,
            parallel_tool_calls=parallel)
        calls = done.choices[0].message.tool_calls or []
        for call in calls:
            jsonschema.validate(json.loads(call.function.arguments),
                                schemas[call.function.name])
        ok = bool(calls) and done.choices[0].finish_reason == "tool_calls"
        return {"tool_choice": label, "ok": ok, "calls": [
            (c.function.name, c.function.arguments) for c in calls]}
    except Exception as exc:  # noqa: BLE001
        return {"tool_choice": label, "ok": False, "error": f"{type(exc).__name__}: {exc}"}


def round_trip(client: OpenAI, model: str) -> dict[str, Any]:
    """auto: a call, its result as a tool message, then the model's answer. A model that does
    not call under auto (the 135M default often answers in prose) is asked again with
    ``required``, so the tool answer still goes back under auto; ``auto_called`` says which."""
    from minisgl_core.bench.structured_schemas import WEATHER

    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris today?"}]
    out: dict[str, Any] = {}
    for choice in ("auto", "required"):
        first = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER],
                                               tool_choice=choice, max_tokens=120,
                                               temperature=0, parallel_tool_calls=False)
        message = first.choices[0].message
        out[choice] = {"finish_reason": first.choices[0].finish_reason,
                       "content": message.content, "calls": [
                           (c.function.name, c.function.arguments)
                           for c in message.tool_calls or []]}
        if message.tool_calls:
            break
    out["auto_called"] = bool(out["auto"]["calls"])
    if not message.tool_calls:
        out["ok"] = False
        return out
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id,
                         "content": json.dumps({"temperature_c": 18, "condition": "sunny"})})
    second = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER],
                                            max_tokens=80, temperature=0)
    out["reply"] = second.choices[0].message.content
    out["ok"] = bool(out["reply"])
    return out


def run(url: str, json_out: bool, parts: str = "schemas,tools,trip") -> int:
    """Every part asked for against ``url``; print each answer (or one JSON document) and the
    summary; 1 unless every schema parsed and every tool call validated."""
    from openai import OpenAI

    from minisgl_core.bench.structured_schemas import SCHEMAS, TOOLSETS

    client = OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=900)
    model = client.models.list().data[0].id
    with ThreadPoolExecutor(8) as pool:
        parsed = list(pool.map(lambda s: parse_one(client, model, s),
                               SCHEMAS if "schemas" in parts else []))
        # one call per answer: a small model asked for several repeats its first call until
        # max_tokens cuts the array (valid calls, but an unfinished answer)
        jobs = [(tools, prompt, choice, False) for tools, prompt in TOOLSETS
                for choice in ("required", {"type": "function", "function": {
                    "name": tools[0]["function"]["name"]}})]
        called = list(pool.map(lambda j: call_one(client, model, *j),
                               jobs if "tools" in parts else []))
    trip = round_trip(client, model) if "trip" in parts else {"ok": None}
    summary = {"model": model, "schemas_valid": sum(r["ok"] for r in parsed),
               "schemas": len(parsed), "tool_calls_valid": sum(r["ok"] for r in called),
               "tool_requests": len(called), "auto_round_trip": trip["ok"]}
    if json_out:
        print(json.dumps({"summary": summary, "schemas": parsed, "tools": called,
                          "round_trip": trip}, indent=1))
    else:
        for r in parsed:
            shown = r.get("answer") or r.get("error")
            print(f"{'ok ' if r['ok'] else 'BAD'} {r['schema']:<12} {shown}")
        for r in called:
            shown = r.get("calls") or r.get("error")
            print(f"{'ok ' if r['ok'] else 'BAD'} {r['tool_choice']:<14} {shown}")
        print(f"auto round trip: {trip}")
        print(summary)
    ok = (summary["schemas_valid"] == summary["schemas"]
          and summary["tool_calls_valid"] == summary["tool_requests"])
    return 0 if ok else 1


def structured_command(
    url: Annotated[str | None, typer.Option(
        help="An already running service (default: start one on the default model).")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    parts: Annotated[str, typer.Option(help="Comma list of schemas, tools, trip.")] = (
        "schemas,tools,trip"),
) -> None:
    """Structured outputs and tool calls through the official `openai` client: 20 response
    schemas, 20 tool sets and an auto round trip; exit 1 if an answer does not validate."""
    extra_needed("openai", "bench")
    extra_needed("jsonschema", "bench")
    if url:
        raise typer.Exit(run(url.rstrip("/"), json_, parts))
    from minisgl_core.testing.service import launch_service

    svc = launch_service("default", log_dir=Path(tempfile.mkdtemp()), timeout=600)
    try:
        code = run(svc.url, json_, parts)
    finally:
        svc.stop()
    raise typer.Exit(code)
