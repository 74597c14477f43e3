"""Grammar-constrained decoding with xgrammar: a StructuredOutput becomes a per-request token mask.

Grammars compile on one background thread (xgrammar releases the GIL while it compiles), so a new
schema never stalls the decode loop of the requests already running; compiled grammars are kept in
an LRU keyed by the spec, failures included, so a repeated schema costs nothing. Each constrained
request owns a matcher that fills one bitmask row per step and accepts the sampled token; EOS is
in the mask only when the grammar may end, so such a request stops exactly when its output is
complete. JSON is generated compact (no free whitespace), which keeps small models from looping
on blanks.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

import torch

from minisgl_core.engine.request import Request, State
from minisgl_core.rejection import RequestRejected
from minisgl_core.sampling import StructuredOutput

MAX_CACHED = 64  # compiled grammars kept (LRU); one holds per-state token masks over the vocabulary
_LOCATION = re.compile(r"^\[[\d:]+\] \S+:\d+: (Check failed: \(.*?\) is false: )?")
_BITS = torch.arange(32, dtype=torch.int32)  # bit i of each int32 word of a bitmask


class GrammarError(ValueError):
    """A structured-output spec that cannot be compiled; the message names the problem."""


def _reason(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = _LOCATION.sub("", lines[0]) if lines else type(exc).__name__
    return text[:300]


def _choice_ebnf(spec: str) -> str:
    try:
        choices = json.loads(spec)
    except ValueError:
        raise GrammarError("choice must be a list of strings") from None
    if (not isinstance(choices, list) or not choices
            or not all(isinstance(c, str) and c for c in choices)):
        raise GrammarError("choice must be a non-empty list of non-empty strings")
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


# xgrammar's rule for a length-bounded JSON string admits control characters, which JSON forbids
# unescaped (json.loads refuses them): narrow it to what its unbounded string rule allows
_LOOSE_CHAR = r'[^\"\\\r\n]'
_JSON_CHAR = r'[^\0-\x1f\"\\\r\n]'


def json_schema_grammar(schema: str) -> Any:
    """The xgrammar Grammar of a JSON schema (given as JSON text), compact and strict JSON."""
    import xgrammar as xgr

    grammar = xgr.Grammar.from_json_schema(schema, any_whitespace=False)
    text = str(grammar)
    return xgr.Grammar.from_ebnf(text.replace(_LOOSE_CHAR, _JSON_CHAR)) if _LOOSE_CHAR in text \
        else grammar


def _what(kind: str) -> str:
    return {"json_schema": "JSON schema", "regex": "regex", "grammar": "grammar",
            "choice": "choice", "json": "JSON"}.get(kind, kind)


class GrammarCache:
    """Compiles StructuredOutputs for one tokenizer on a background thread; LRU of futures."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int],
                 max_cached: int = MAX_CACHED) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_ids = sorted(stop_token_ids)
        self._max_cached = max_cached
        self._compiler: Any = None  # built on the worker thread at first use (~0.5 s)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minisgl-grammar")
        self._entries: OrderedDict[tuple[str, str], Future[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, spec: StructuredOutput) -> Future[Any]:
        """The CompiledGrammar of ``spec``, as a future (done at once on a cache hit)."""
        key = (spec.kind, spec.spec)
        with self._lock:
            future = self._entries.get(key)
            if future is not None:
                self._entries.move_to_end(key)
                return future
            future = self._pool.submit(self._compile, spec)
            self._entries[key] = future
            while len(self._entries) > self._max_cached:
                self._entries.popitem(last=False)
            return future

    def close(self) -> None:
        """Stop the compile thread (queued compiles are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, spec: StructuredOutput) -> Any:
        import xgrammar as xgr

        if self._compiler is None:
            info = xgr.TokenizerInfo.from_huggingface(_hf_tokenizer(self._tokenizer),
                                                      vocab_size=self._vocab_size,
                                                      stop_token_ids=self._stop_ids)
            # our LRU is the cache; xgrammar's own would keep every schema forever
            self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        c = self._compiler
        try:
            if spec.kind == "json_schema":
                return c.compile_grammar(json_schema_grammar(spec.spec))
            if spec.kind == "json":
                return c.compile_json_schema('{"type": "object"}', any_whitespace=False)
            if spec.kind == "regex":
                return c.compile_regex(spec.spec)
            if spec.kind == "choice":
                return c.compile_grammar(_choice_ebnf(spec.spec))
            return c.compile_grammar(spec.spec)
        except GrammarError:
            raise
        except Exception as exc:
            raise GrammarError(f"invalid {_what(spec.kind)}: {_reason(exc)}") from None


class GrammarState:
    """One request's position in its grammar.

    With ``wait_for`` (the ids that end a reasoning block) the grammar applies only once the
    output has produced them: until then tokens are free and the matcher does not move.
    """

    def __init__(self, compiled: Any, wait_for: Sequence[int] = ()) -> None:
        import xgrammar as xgr

        self.matcher = xgr.GrammarMatcher(compiled)
        self._wait_for = tuple(wait_for)
        self._recent: list[int] = []  # the last len(wait_for) tokens while waiting

    @property
    def active(self) -> bool:
        """Whether the grammar constrains the next token."""
        return not self._wait_for

    def accept(self, token: int) -> bool:
        """Advance by the sampled token; False if the grammar refuses it (it never should)."""
        if self._wait_for:
            self._recent = [*self._recent, token][-len(self._wait_for):]
            if tuple(self._recent) == self._wait_for:
                self._wait_for = ()
            return True
        return bool(self.matcher.accept_token(token))

    @property
    def finished(self) -> bool:
        """True once the grammar accepted a stop token: the output is complete."""
        return self.active and bool(self.matcher.is_terminated())


class GrammarGate:
    """Holds constrained requests outside the scheduler until their grammar has compiled."""

    def __init__(self, cache: GrammarCache | None) -> None:
        self.cache = cache  # None: no tokenizer here (a tensor-parallel follower)
        self.parked: dict[str, Request] = {}

    def admit(self, req: Request) -> bool:
        """Start (or find) ``req``'s grammar: True when it is attached already, False when the
        request is parked until it compiles; RequestRejected when it is known to fail."""
        spec = req.sampling.structured
        assert spec is not None
        if self.cache is None:
            raise RequestRejected("structured outputs need the tokenizer", code="invalid_grammar")
        req.grammar_future = self.cache.submit(spec)
        if req.grammar_future.done():
            self._attach(req)
            return True
        self.parked[req.request_id] = req
        return False

    def ready(self) -> tuple[list[Request], list[tuple[Request, RequestRejected]]]:
        """Take the parked requests whose grammar is done: (attached, refused with why)."""
        attached, refused = [], []
        for rid, req in list(self.parked.items()):
            if req.grammar_future.done():
                del self.parked[rid]
                try:
                    self._attach(req)
                    attached.append(req)
                except RequestRejected as exc:
                    req.state = State.FINISHED
                    refused.append((req, exc))
        return attached, refused

    def drop(self, request_id: str) -> bool:
        """Forget a parked request (aborted); False if it is not parked."""
        req = self.parked.pop(request_id, None)
        if req is not None:
            req.state = State.FINISHED  # it never reached the scheduler
        return req is not None

    def wait(self, timeout: float) -> None:
        """Block until a parked grammar is done or ``timeout`` seconds passed."""
        wait_futures([r.grammar_future for r in self.parked.values()], timeout=timeout,
                     return_when=FIRST_COMPLETED)

    def close(self) -> None:
        """Stop the compile thread."""
        if self.cache is not None:
            self.cache.close()

    @staticmethod
    def _attach(req: Request) -> None:
        try:
            spec = req.sampling.structured
            req.grammar = GrammarState(req.grammar_future.result(),
                                       spec.wait_for if spec is not None else ())
        except GrammarError as exc:
            raise RequestRejected(str(exc), code="invalid_grammar") from None
        finally:
            req.grammar_future = None


def apply_masks(logits: torch.Tensor, rows: Sequence[int],
                states: Sequence[GrammarState]) -> None:
    """In place on ``logits [N, V]``: tokens row ``rows[i]``'s grammar forbids become -inf
    (a grammar still waiting for the end of a reasoning block forbids nothing yet)."""
    import xgrammar as xgr

    active = [(r, st) for r, st in zip(rows, states, strict=True) if st.active]
    if not active:
        return
    rows, states = [r for r, _ in active], [st for _, st in active]
    n, v = len(rows), logits.shape[1]
    bitmask = xgr.allocate_token_bitmask(n, v)  # [n, ceil(V / 32)] int32, bit set = allowed
    for i, state in enumerate(states):
        state.matcher.fill_next_token_bitmask(bitmask, i)
    words = bitmask.to(logits.device, non_blocking=True)
    allowed = ((words.unsqueeze(-1) >> _BITS.to(logits.device)) & 1).bool()  # [n, W, 32]
    allowed = allowed.view(n, -1)[:, :v]  # [n, V]
    index = torch.tensor(list(rows), device=logits.device)
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))


def _hf_tokenizer(tokenizer: Any) -> Any:
    """A transformers tokenizer for xgrammar, which reads its vocabulary type from one: the
    engine's transformers-free tokenizer is swapped for transformers' own (once per engine)."""
    from minisgl_core.text.light import LightTokenizer

    if not isinstance(tokenizer, LightTokenizer):
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer.name_or_path, local_files_only=True)
