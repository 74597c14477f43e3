"""The ``synthetic`` scheduler role: no model, deterministic tokens, real request bookkeeping.

It takes tokenized requests and answers each by echoing its prompt ids (output token ``k`` is
``prompt_ids[k % len(prompt_ids)]``), one token per running request per step, at full speed or
at ``tokens_per_s`` per request. Everything the service does around the model still happens:
max_tokens, EOS and stop_token_ids (after min_tokens), aborts, the context and KV-cache limits,
admission by ``max_running_requests`` and page accounting, and the same Stats for /metrics. So
the frontends, the text roles and the transports can be measured and tested on their own.

Pages: a request reserves, when it is admitted, the pages its prompt and its longest answer
can need (the last token is never fed back, as in the engine) and returns them when it ends.
Stop strings are cut by the detokenizer; this scheduler cannot see text and runs the request
on to max_tokens or a stop id. A request is admitted by the engine's own checks
(``engine.admission``), which import no torch: nor does this process.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minisgl_core.engine.admission import Limits, admit
from minisgl_core.service.spec import RoleContext
from minisgl_core.store.naming import model_name_of
from minisgl_core.wire.schema import PromptLogprobs, SamplingParams, TokenLogprob

DEFAULT_PAGE_SIZE = 16
DEFAULT_MAX_RUNNING = 128
OPTIONS = ("tokens_per_s",)


@dataclass(frozen=True, slots=True)
class SyntheticOutput:
    """One request's new token from one step (satisfies ``interfaces.StepResult``)."""

    request_id: str
    token_ids: tuple[int, ...]
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    logprobs: tuple[TokenLogprob, ...] = ()
    prompt_logprobs: PromptLogprobs | None = None  # never: this scheduler has no model


@dataclass(frozen=True, slots=True)
class SyntheticStats:
    """Load and page accounting (satisfies ``interfaces.SchedulerStats``)."""

    running: int
    waiting: int
    pages_total: int
    pages_free: int
    pages_cached: int = 0
    cache_hit_tokens: int = 0
    page_size: int = 0  # tokens per page (0: not reported)


@dataclass(slots=True)
class _Request:
    request_id: str
    prompt: tuple[int, ...]
    sampling: SamplingParams
    max_tokens: int
    pages: int  # reserved from admission to the end
    generated: int = 0
    stop_ids: frozenset[int] = field(default_factory=frozenset)


def _model_facts(model_dir: str) -> tuple[int, frozenset[int]]:
    """vocab_size and the EOS ids of config.json and generation_config.json."""
    path = Path(model_dir)
    config = json.loads((path / "config.json").read_text())
    eos: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        file = path / name
        value = json.loads(file.read_text()).get("eos_token_id") if file.is_file() else None
        eos.update([value] if isinstance(value, int) else value or [])
    return int(config["vocab_size"]), frozenset(int(t) for t in eos)


class SyntheticScheduler:
    """Satisfies ``interfaces.Scheduler`` without a model; see the module docstring."""

    def __init__(self, *, vocab_size: int, max_seq_len: int, eos_token_ids: frozenset[int] = (
            frozenset()), num_pages: int | None = None, page_size: int = DEFAULT_PAGE_SIZE,
                 max_running_requests: int = DEFAULT_MAX_RUNNING,
                 tokens_per_s: float | None = None, model_name: str = "synthetic") -> None:
        if tokens_per_s is not None and not tokens_per_s > 0:
            raise ValueError(f"tokens_per_s must be > 0, got {tokens_per_s}")
        self.vocab_size, self.max_seq_len = vocab_size, max_seq_len
        self.eos_token_ids = eos_token_ids
        self.page_size, self.max_running = page_size, max_running_requests
        # enough for max_running requests of full context unless told otherwise
        self.num_pages = num_pages or max_running_requests * -(-max_seq_len // page_size)
        self.interval = None if tokens_per_s is None else 1.0 / tokens_per_s
        self.model_name = model_name
        self.free_pages = self.num_pages
        self.limits = Limits(vocab_size, max_seq_len, page_size, self.num_pages)
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.requests: dict[str, _Request] = {}
        self._next_step = 0.0

    def info(self) -> dict[str, str]:
        return {"model_name": self.model_name, "max_seq_len": str(self.max_seq_len),
                "vocab_size": str(self.vocab_size)}

    def add_request(self, request_id: str, prompt_ids: Sequence[int],
                    sampling: SamplingParams) -> None:
        # the engine's own admission checks, on this scheduler's limits
        admitted = admit(request_id, prompt_ids, sampling, self.limits, self.requests)
        stop = frozenset(sampling.stop_token_ids) | (
            frozenset() if sampling.ignore_eos else self.eos_token_ids)
        req = _Request(request_id, tuple(admitted.prompt), sampling, admitted.max_tokens,
                       admitted.pages, stop_ids=stop)
        self.requests[request_id] = req
        self.waiting.append(req)

    def abort(self, request_id: str) -> bool:
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        if req in self.running:
            self.running.remove(req)
            self.free_pages += req.pages
        else:
            self.waiting.remove(req)
        return True

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> list[SyntheticOutput]:
        if self.interval is not None:  # pace: one token per request every interval seconds
            now = time.monotonic()
            if self._next_step > now:
                time.sleep(self._next_step - now)
            self._next_step = max(now, self._next_step) + self.interval
        while (self.waiting and len(self.running) < self.max_running
               and self.waiting[0].pages <= self.free_pages):
            req = self.waiting.popleft()
            self.free_pages -= req.pages
            self.running.append(req)
        outputs, still = [], []
        for req in self.running:
            token = req.prompt[req.generated % len(req.prompt)]
            req.generated += 1
            reason = None
            if token in req.stop_ids and req.generated > req.sampling.min_tokens:
                reason = "stop"
            elif req.generated >= req.max_tokens:
                reason = "length"
            if reason is None:
                still.append(req)
            else:
                self.free_pages += req.pages
                del self.requests[req.request_id]
            outputs.append(SyntheticOutput(req.request_id, (token,), reason, len(req.prompt),
                                           req.generated))
        self.running = still
        return outputs

    def stats(self) -> SyntheticStats:
        return SyntheticStats(len(self.running), len(self.waiting), self.num_pages,
                              self.free_pages, page_size=self.page_size)

    def follow(self) -> None:
        raise RuntimeError("the synthetic scheduler runs as one rank only")

    def close(self) -> None:
        """Nothing to release."""


def check_options(options: Mapping[str, Any]) -> float | None:
    """tokens_per_s of a [roles.scheduler.synthetic] table; ValueError for anything else."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} in [roles.scheduler.synthetic] "
                         f"(options: {', '.join(OPTIONS)})")
    rate = options.get("tokens_per_s")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)):
        raise ValueError(f"tokens_per_s must be a number, got {rate!r}")
    return None if rate is None else float(rate)


def make_synthetic(context: RoleContext) -> SyntheticScheduler:
    """The role factory: sizes from the launch config, facts from the model's config.json."""
    spec, cfg = context.spec, context.spec.config
    rate = check_options(context.options)
    if cfg.tp != 1:
        raise ValueError("the synthetic scheduler runs as one rank: use --tp 1")
    vocab, eos = _model_facts(spec.model_dir)
    return SyntheticScheduler(
        vocab_size=vocab, max_seq_len=spec.max_context, eos_token_ids=eos,
        num_pages=cfg.num_pages, page_size=cfg.page_size or DEFAULT_PAGE_SIZE,
        max_running_requests=cfg.max_running_requests or DEFAULT_MAX_RUNNING,
        tokens_per_s=rate, model_name=model_name_of(Path(spec.model_dir)))
