"""Where ``minisgl chat`` gets its answers: a running service (streamed over the OpenAI SSE API,
with nothing but the standard library) or, offline, an engine in this process."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Message = Mapping[str, str]


class ChatError(Exception):
    """A turn that failed: the service refused it, or cannot be reached."""


@dataclass(frozen=True)
class Params:
    """Sampling parameters for every turn (None: the server's default)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None


@dataclass
class Outcome:
    """How the last turn ended (filled in while its stream is read)."""

    finish_reason: str | None = None
    completion_tokens: int | None = None  # None: not reported (e.g. stopped early)


class HttpBackend:
    """Streams answers from ``/v1/chat/completions`` of a running service."""

    def __init__(self, url: str, api_key: str | None, model: str | None, params: Params,
                 *, timeout: float = 600.0) -> None:
        base = url.rstrip("/")
        self.base = base[: -len("/v1")] if base.endswith("/v1") else base
        self.api_key = api_key
        self.params = params
        self.timeout = timeout
        self.model = model or self._served_model()
        self.outcome = Outcome()

    def describe(self) -> str:
        """One line for the banner."""
        return f"{self.model} at {self.base}"

    def _open(self, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise ChatError(f"{exc.code}: {_error_message(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ChatError(f"cannot reach {self.base}: {reason}") from None

    def _served_model(self) -> str:
        with self._open("/v1/models") as resp:
            return str(json.load(resp)["data"][0]["id"])

    def stream(self, messages: Sequence[Message]) -> Iterator[str]:
        """Yield the answer's text as it arrives; closing early aborts it on the server."""
        self.outcome = outcome = Outcome()
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "stream": True,
                                "stream_options": {"include_usage": True}}
        body.update({k: v for k, v in vars(self.params).items() if v is not None})
        with self._open("/v1/chat/completions", body) as resp:
            for raw in resp:  # one SSE line at a time, as the server flushes them
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise ChatError(str(event["error"].get("message", "the stream failed")))
                if event.get("usage"):
                    outcome.completion_tokens = int(event["usage"]["completion_tokens"])
                for choice in event.get("choices", []):
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        yield text
                    if choice.get("finish_reason"):
                        outcome.finish_reason = str(choice["finish_reason"])


class OfflineBackend:
    """Runs the engine in this process (``minisgl_core.LLM``) and streams its tokens as text."""

    def __init__(self, model: str | None, params: Params) -> None:
        from minisgl_core import LLM, SamplingParams

        self.llm = LLM(model)
        self.model = model or "default"
        self.sampling = SamplingParams(**{k: v for k, v in vars(params).items()
                                          if v is not None})
        self.outcome = Outcome()
        self._turns = 0

    def describe(self) -> str:
        """One line for the banner."""
        return f"{self.model} (offline, in this process)"

    def stream(self, messages: Sequence[Message]) -> Iterator[str]:
        """Yield the answer's text step by step; closing early aborts the request."""
        from minisgl_core.text.hf import raw_decoder
        from minisgl_core.text.incremental import IncrementalDetokenizer

        self.outcome = outcome = Outcome()
        tokenizer, engine = self.llm.tokenizer, self.llm.engine
        prompt = tokenizer.apply_chat_template([dict(m) for m in messages],
                                               add_generation_prompt=True, tokenize=False)
        ids = tokenizer.encode(prompt, add_special_tokens=False)  # the template holds any BOS
        self._turns += 1
        rid = f"chat-{self._turns}"
        detok = IncrementalDetokenizer(raw_decoder(tokenizer, True), ids[-4:])
        engine.add_request(rid, ids, self.sampling)
        try:
            for out in engine.run_until_idle():
                text = detok.push(out.token_ids)
                if text:
                    yield text
                if out.finish_reason is not None:
                    outcome.finish_reason = out.finish_reason
                    outcome.completion_tokens = out.completion_tokens
            if tail := detok.finish():
                yield tail
        finally:
            if outcome.finish_reason is None:
                engine.abort(rid)


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return str(exc.reason)
