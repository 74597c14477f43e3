"""A bounded load generator for the OpenAI routes and the checks every answer must pass.

Each request follows a ``Plan`` drawn from a seeded RNG: chat or completions, streaming or not,
random max_tokens, stop strings, n, temperature, and sometimes a deliberate disconnect. Every
request has a deadline, so a hang shows up as a failure instead of a stuck test.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
from reliability_support import AUTH

REQUEST_DEADLINE_S = 60.0
# the tiny random model often writes "o", "3", "7", "T", "天": those stop strings get hit
STOP_POOL = ("o", " o", "3", "7", "T", "天", "St", "e", "the", ".", "\n", "中", "😀", "zzz", "!")
WORDS = ("The", "quick", "brown", "fox", "capital", "France", "Paris", "café", "😀", "你好",
         "tiny", "model", "stream", "0123", "def", "return", "world", "!")
FINISH = {"stop", "length"}


@dataclass(frozen=True)
class Plan:
    """One request of a load run."""

    index: int
    chat: bool
    stream: bool
    max_tokens: int
    stop: tuple[str, ...] = ()
    n: int = 1
    temperature: float = 0.0
    seed: int | None = None
    ignore_eos: bool = False
    include_usage: bool = False
    prompt: str | tuple[int, ...] = "hello"
    cut_after_frames: int | None = None  # streaming: disconnect after this many frames
    give_up_after_s: float | None = None  # non-streaming: disconnect after this long

    @property
    def disconnects(self) -> bool:
        return self.cut_after_frames is not None or self.give_up_after_s is not None

    def path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"

    def body(self, model: str) -> dict[str, object]:
        body: dict[str, object] = {
            "model": model, "max_tokens": self.max_tokens, "stream": self.stream,
            "temperature": self.temperature, "ignore_eos": self.ignore_eos, "n": self.n}
        if self.chat:
            body["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = list(self.prompt) if isinstance(self.prompt, tuple) else self.prompt
        if self.stop:
            body["stop"] = list(self.stop) if len(self.stop) > 1 else self.stop[0]
        if self.seed is not None:
            body["seed"] = self.seed
        if self.stream and self.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body


def make_plans(count: int, seed: int, *, vocab_size: int, disconnect_rate: float = 0.2,
               max_tokens: int = 48) -> list[Plan]:
    """``count`` random plans; about ``disconnect_rate`` of them leave early on purpose."""
    rng = random.Random(seed)
    plans = []
    for i in range(count):
        chat = rng.random() < 0.6
        stream = rng.random() < 0.5
        leave = rng.random() < disconnect_rate
        if not chat and rng.random() < 0.3:
            prompt: str | tuple[int, ...] = tuple(rng.randrange(vocab_size)
                                                  for _ in range(rng.randint(1, 24)))
        else:
            prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 16)))
        plans.append(Plan(
            index=i, chat=chat, stream=stream, max_tokens=rng.randint(1, max_tokens),
            stop=tuple(rng.sample(STOP_POOL, rng.randint(1, 3))) if rng.random() < 0.5 else (),
            n=2 if rng.random() < 0.1 else 1,
            temperature=rng.choice((0.0, 0.0, 0.7, 1.0)),
            seed=rng.randrange(2**31) if rng.random() < 0.3 else None,
            ignore_eos=rng.random() < 0.5, include_usage=stream and rng.random() < 0.5,
            prompt=prompt,
            cut_after_frames=rng.randint(1, 8) if leave and stream else None,
            give_up_after_s=rng.uniform(0.02, 0.4) if leave and not stream else None))
    return plans


@dataclass
class Outcome:
    """What one request got back, and what was wrong with it."""

    plan: Plan
    status: int | None = None
    texts: dict[int, str] = field(default_factory=dict)
    finish: dict[int, str] = field(default_factory=dict)
    usage: dict[str, int] | None = None
    disconnected: bool = False  # the client left on purpose before the end
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class LoadReport:
    """The totals of one load run."""

    sent: int
    succeeded: int
    failed: int
    aborted: int
    stop_hits: int  # answers that ended on one of their stop strings
    seconds: float
    failures: tuple[str, ...]


async def _stream(client: httpx.AsyncClient, url: str, plan: Plan, body: dict[str, object],
                  out: Outcome) -> None:
    async with client.stream("POST", url, json=body, headers=AUTH) as resp:
        out.status = resp.status_code
        if resp.status_code != 200:
            out.problems.append(f"status {resp.status_code}: {(await resp.aread())[:300]!r}")
            return
        frames: list[str] = []
        async for line in resp.aiter_lines():
            if not line:
                continue
            frames.append(line)
            if plan.cut_after_frames is not None and len(frames) >= plan.cut_after_frames:
                out.disconnected = True
                return
    out.problems += check_frames(plan, frames, out)


def check_frames(plan: Plan, frames: Sequence[str], out: Outcome) -> list[str]:
    """SSE rules: data frames only, nothing after [DONE] or after a choice's finish, one finish
    per choice, the usage chunk only when asked and last; fills ``out`` with the text."""
    problems: list[str] = []
    if not frames or frames[-1] != "data: [DONE]":
        problems.append(f"stream did not end with [DONE]: {list(frames[-2:])}")
    if "data: [DONE]" in frames[:-1]:
        problems.append("a frame after [DONE]")
    usage_seen = False
    for line in frames:
        if not line.startswith("data: "):
            problems.append(f"not a data frame: {line[:80]!r}")
            continue
        if line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            problems.append(f"error event: {chunk['error']}")
            continue
        if usage_seen:
            problems.append("a frame after the usage chunk")
        if not chunk["choices"]:
            usage_seen = True
            out.usage = chunk.get("usage")
            continue
        for choice in chunk["choices"]:
            i = choice["index"]
            if i in out.finish:
                problems.append(f"choice {i}: a frame after its finish_reason")
            piece = choice["delta"].get("content") if plan.chat else choice.get("text")
            out.texts[i] = out.texts.get(i, "") + (piece or "")
            if choice.get("finish_reason") is not None:
                out.finish[i] = choice["finish_reason"]
    if plan.include_usage and not usage_seen:
        problems.append("include_usage asked, no usage chunk")
    if not plan.include_usage and usage_seen:
        problems.append("a usage chunk nobody asked for")
    return problems


async def _whole(client: httpx.AsyncClient, url: str, plan: Plan, body: dict[str, object],
                 out: Outcome) -> None:
    call = client.post(url, json=body, headers=AUTH)
    try:
        resp = await (asyncio.wait_for(call, plan.give_up_after_s) if plan.give_up_after_s
                      else call)
    except TimeoutError:
        out.disconnected = True
        return
    out.status = resp.status_code
    if resp.status_code != 200:
        out.problems.append(f"status {resp.status_code}: {resp.text[:300]}")
        return
    data = resp.json()
    for choice in data["choices"]:
        i = choice["index"]
        out.texts[i] = (choice["message"]["content"] if plan.chat else choice["text"]) or ""
        out.finish[i] = choice["finish_reason"]
    out.usage = data.get("usage")
    if out.usage is None:
        out.problems.append("no usage in a non-streaming answer")


def check_answer(plan: Plan, out: Outcome) -> list[str]:
    """Consistency of a complete answer: finish reasons, usage against text, stop strings."""
    problems = []
    if sorted(out.finish) != list(range(plan.n)) or sorted(out.texts) != list(range(plan.n)):
        problems.append(f"choices {sorted(out.texts)} / finishes {out.finish}, wanted {plan.n}")
    for i, reason in out.finish.items():
        if reason not in FINISH:
            problems.append(f"choice {i}: finish_reason {reason!r}")
    for i, text in out.texts.items():
        hit = [s for s in plan.stop if s in text]
        if hit:
            problems.append(f"choice {i}: stop string {hit[0]!r} left in the text {text!r}")
    u = out.usage
    if u is not None:
        if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
            problems.append(f"usage does not add up: {u}")
        if u["prompt_tokens"] <= 0:
            problems.append(f"no prompt tokens counted: {u}")
        if any(out.texts.values()) and u["completion_tokens"] <= 0:
            problems.append(f"text but completion_tokens {u['completion_tokens']}")
        if u["completion_tokens"] > plan.max_tokens * plan.n:
            problems.append(f"completion_tokens {u['completion_tokens']} > max_tokens")
        if plan.n == 1 and out.finish.get(0) == "length" \
                and u["completion_tokens"] != plan.max_tokens:
            problems.append(f"finish length after {u['completion_tokens']} tokens, "
                            f"max_tokens {plan.max_tokens}")
    return problems


async def run_one(client: httpx.AsyncClient, base: str, model: str, plan: Plan) -> Outcome:
    """Send one planned request and check what came back (never waits past the deadline)."""
    out = Outcome(plan)
    body = plan.body(model)
    url = base + plan.path()
    try:
        work = _stream(client, url, plan, body, out) if plan.stream else \
            _whole(client, url, plan, body, out)
        await asyncio.wait_for(work, REQUEST_DEADLINE_S)
    except TimeoutError:
        out.problems.append(f"no answer within {REQUEST_DEADLINE_S:.0f} s")
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        out.problems.append(f"{type(exc).__name__}: {exc}")
    if not out.disconnected and not out.problems:
        out.problems += check_answer(plan, out)
    return out


async def run_load_async(base: str, model: str, plans: Sequence[Plan],
                         concurrency: int) -> list[Outcome]:
    """Run ``plans`` with at most ``concurrency`` in flight."""
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency * 2, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(REQUEST_DEADLINE_S, connect=10)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:

        async def one(plan: Plan) -> Outcome:
            async with gate:
                return await run_one(client, base, model, plan)

        return list(await asyncio.gather(*(one(p) for p in plans)))


def run_load(base: str, model: str, plans: Sequence[Plan], concurrency: int) -> LoadReport:
    """Run a load from synchronous test code and sum it up."""
    start = time.monotonic()
    outcomes = asyncio.run(run_load_async(base, model, plans, concurrency))
    failures = tuple(f"request {o.plan.index} ({_describe(o.plan)}): {'; '.join(o.problems)}"
                     for o in outcomes if o.problems)
    aborted = sum(o.disconnected for o in outcomes if o.ok)
    stop_hits = sum(1 for o in outcomes if o.ok and not o.disconnected and o.plan.stop
                    and "stop" in o.finish.values())
    return LoadReport(sent=len(outcomes), succeeded=len(outcomes) - len(failures) - aborted,
                      failed=len(failures), aborted=aborted, stop_hits=stop_hits,
                      seconds=time.monotonic() - start, failures=failures)


def _describe(plan: Plan) -> str:
    kind = "chat" if plan.chat else "completions"
    return (f"{kind} stream={plan.stream} n={plan.n} max_tokens={plan.max_tokens} "
            f"stop={plan.stop} T={plan.temperature}")
