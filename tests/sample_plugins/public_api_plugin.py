"""A plugin that imports nothing of minisgl but ``minisgl_core.api``: one part of every kind a
contract suite checks (a transport, a tokenizer, a detokenizer, a scheduler), each wrapping the
core's own and counting what goes through it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from minisgl_core.api import (
    Detokenizer,
    GenerateRequest,
    InprocTransport,
    Receiver,
    Register,
    RoleContext,
    RoleRegister,
    SamplingParams,
    Scheduler,
    SchedulerStats,
    Sender,
    StepResult,
    TextDelta,
    TokenBatch,
    TokenizedRequest,
    Tokenizer,
    hookimpl,
    make_detokenizer,
    make_scheduler,
    make_tokenizer,
)

NAME = "counted"


@hookimpl
def minisgl_register_transports(register: Register) -> None:
    register(NAME, "public_api_plugin:CountedTransport")


@hookimpl
def minisgl_register_roles(register: RoleRegister) -> None:
    register("tokenizer", NAME, "public_api_plugin:make_counted_tokenizer")
    register("detokenizer", NAME, "public_api_plugin:make_counted_detokenizer")
    register("scheduler", NAME, "public_api_plugin:make_counted_scheduler")


class CountedTransport:
    """The inproc transport under another name, counting the channel ends it opened."""

    name: ClassVar[str] = NAME
    multiprocess: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self._inner = InprocTransport(options)
        self.opened = 0

    def endpoint(self, run_dir: Path, channel: str) -> str:
        return self._inner.endpoint(run_dir, channel)

    def push(self, endpoint: str, *, bind: bool = False) -> Sender:
        self.opened += 1
        return self._inner.push(endpoint, bind=bind)

    def pull(self, endpoint: str, *, bind: bool = True) -> Receiver:
        self.opened += 1
        return self._inner.pull(endpoint, bind=bind)

    def pub(self, endpoint: str, *, bind: bool = True) -> Sender:
        self.opened += 1
        return self._inner.pub(endpoint, bind=bind)

    def sub(self, endpoint: str, *, bind: bool = False) -> Receiver:
        self.opened += 1
        return self._inner.sub(endpoint, bind=bind)

    def close(self) -> None:
        self._inner.close()


def _core(context: RoleContext) -> RoleContext:
    """The context the core's factory gets: this role's options are not its options."""
    return replace(context, options={})


class CountedTokenizer:
    def __init__(self, inner: Tokenizer) -> None:
        self.inner, self.calls = inner, 0

    def tokenize(self, request: GenerateRequest) -> TokenizedRequest:
        self.calls += 1
        return self.inner.tokenize(request)

    def close(self) -> None:
        self.inner.close()


class CountedDetokenizer:
    def __init__(self, inner: Detokenizer) -> None:
        self.inner, self.calls = inner, 0

    def process(self, batch: TokenBatch) -> Mapping[str, Sequence[TextDelta]]:
        self.calls += 1
        return self.inner.process(batch)

    def active_count(self) -> int:
        return self.inner.active_count()

    def close(self) -> None:
        self.inner.close()


class CountedScheduler:
    def __init__(self, inner: Scheduler) -> None:
        self.inner, self.steps = inner, 0

    def info(self) -> Mapping[str, str]:
        return self.inner.info()

    def add_request(self, request_id: str, prompt_ids: Sequence[int],
                    sampling: SamplingParams) -> None:
        self.inner.add_request(request_id, prompt_ids, sampling)

    def abort(self, request_id: str) -> bool:
        return self.inner.abort(request_id)

    def has_work(self) -> bool:
        return self.inner.has_work()

    def step(self) -> Sequence[StepResult]:
        self.steps += 1
        return self.inner.step()

    def stats(self) -> SchedulerStats:
        return self.inner.stats()

    def follow(self) -> None:
        self.inner.follow()

    def close(self) -> None:
        self.inner.close()


def make_counted_tokenizer(context: RoleContext) -> CountedTokenizer:
    return CountedTokenizer(make_tokenizer(_core(context)))


def make_counted_detokenizer(context: RoleContext) -> CountedDetokenizer:
    return CountedDetokenizer(make_detokenizer(_core(context)))


def make_counted_scheduler(context: RoleContext) -> CountedScheduler:
    return CountedScheduler(make_scheduler(_core(context)))
