"""Role contracts: the behaviour every tokenizer, detokenizer and scheduler role promises.

Subclass one in a test module under a name pytest collects, as with ``TransportContract``::

    class TestUpperTokenizer(TokenizerContract):
        role = "upper"                              # the registered name
        plugins = ["minisgl_acme"]                  # modules to load (None: every entry point)
        options = {"mode": "upper"}                 # its [roles.tokenizer.upper] table

The role is built the way a worker builds it: looked up in the registries the plugins fill, and
called with a ``RoleContext``. ``model`` names the model directory the roles read (None: a tiny
random model made in code); ``config`` holds LaunchConfig keys (engine sizes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pytest

from minisgl_core.interfaces import Detokenizer, Scheduler, StepResult, Tokenizer
from minisgl_core.messages import (
    ChatMessage,
    DetokenizeInfo,
    ErrorInfo,
    GenerateRequest,
    SamplingParams,
    TextDelta,
    TokenBatch,
    TokenDelta,
    TokenizedRequest,
)

MAX_STEPS = 2000  # every scheduler loop here is bounded


class RoleContractBase:
    """Settings a subclass overrides, and how the role under test is built."""

    kind: ClassVar[str] = ""
    role: ClassVar[str] = ""
    plugins: ClassVar[Sequence[str | object] | None] = ()
    options: ClassVar[Mapping[str, Any]] = {}
    model: ClassVar[str | None] = None
    config: ClassVar[Mapping[str, Any]] = {"num_pages": 64, "max_seq_len_override": 256}

    @pytest.fixture(scope="class")
    @classmethod
    def model_dir(cls, tmp_path_factory: pytest.TempPathFactory) -> str:
        if cls.model is not None:
            return cls.model
        from minisgl_core.testing.tiny import make_tiny_model

        return str(make_tiny_model(tmp_path_factory.mktemp("role-model") / "tiny", "llama"))

    def build(self, model_dir: str, **config: Any) -> Any:
        """A new instance of the role under test, built through the plugin registries."""
        from minisgl_core.config import LaunchConfig
        from minisgl_core.launcher import max_context
        from minisgl_core.plugins import build_manager, collect
        from minisgl_core.runtime.spec import Endpoints, RoleContext, WorkerSpec

        pm = build_manager(autoload=self.plugins is None, extra=list(self.plugins or ()))
        regs = collect(pm)
        cfg = LaunchConfig(transport="inproc", **{**self.config, **config},
                           roles={self.kind: {"name": self.role, self.role: dict(self.options)}})
        endpoints = Endpoints(*(f"inproc://contract/{c}" for c in
                                ("tokenizer", "scheduler", "detokenizer", "control")))
        spec = WorkerSpec(role=self.kind, config=cfg, endpoints=endpoints,  # type: ignore[arg-type]
                          model_dir=model_dir,
                          max_context=max_context(model_dir, cfg.max_seq_len_override))
        factory = regs.roles.get(self.kind, self.role)
        return factory(RoleContext(spec, cfg.role_table(self.kind), regs.models))

    @pytest.fixture
    def made(self, model_dir: str) -> Iterator[Any]:
        role = self.build(model_dir)
        try:
            yield role
        finally:
            role.close()


def _request(**fields: Any) -> GenerateRequest:
    sampling = fields.pop("sampling", SamplingParams(max_tokens=8))
    return GenerateRequest(request_id=fields.pop("request_id", "r1"), owner="fe-1",
                           sampling=sampling, **fields)


class TokenizerContract(RoleContractBase):
    """What ``run_tokenizer`` relies on: one TokenizedRequest per request, never an exception."""

    kind = "tokenizer"

    def test_satisfies_the_protocol(self, made: Any) -> None:
        assert isinstance(made, Tokenizer)

    def test_a_prompt_becomes_token_ids(self, made: Tokenizer) -> None:
        sampling = SamplingParams(max_tokens=8, stop=("\n\n",), skip_special_tokens=False)
        out = made.tokenize(_request(prompt="Hello world", sampling=sampling, arrival_time=1.5))
        assert isinstance(out, TokenizedRequest) and out.error is None
        assert out.request_id == "r1" and out.sampling == sampling and out.arrival_time == 1.5
        assert out.prompt_ids and all(isinstance(t, int) and t >= 0 for t in out.prompt_ids)
        info = out.detokenize  # what the detokenizer needs rides along
        assert info.owner == "fe-1" and info.stop == ("\n\n",) and not info.skip_special_tokens

    def test_chat_messages_become_token_ids(self, made: Tokenizer) -> None:
        out = made.tokenize(_request(messages=(ChatMessage("user", "Hello"),)))
        assert out.error is None and out.prompt_ids

    def test_token_ids_pass_through(self, made: Tokenizer) -> None:
        out = made.tokenize(_request(token_ids=(5, 6, 7)))
        assert out.error is None and out.prompt_ids == (5, 6, 7)

    def test_a_bad_request_comes_back_with_an_error(self, made: Tokenizer) -> None:
        for bad in (_request(token_ids=tuple(range(5, 5000))),  # beyond any context here
                    _request(token_ids=(10**9,)),  # outside the vocabulary
                    _request(prompt="")):
            out = made.tokenize(bad)
            assert isinstance(out.error, ErrorInfo) and out.prompt_ids == ()
            assert out.request_id == "r1" and out.detokenize.owner == "fe-1"

    def test_close_is_idempotent(self, model_dir: str) -> None:
        role = self.build(model_dir)
        role.close()
        role.close()


class DetokenizerContract(RoleContractBase):
    """What ``run_detokenizer`` relies on: text per owner, exactly one terminal delta, last."""

    kind = "detokenizer"
    text: ClassVar[str] = "Hello world! The capital of France is Paris."

    def expected_text(self, text: str) -> str:
        """The text the role makes of ``text``'s tokens (override for a transforming role)."""
        return text

    def ids(self, model_dir: str, text: str) -> list[int]:
        from minisgl_core.text.hf import load_tokenizer

        return list(load_tokenizer(model_dir).encode(text, add_special_tokens=False))

    def stream(self, role: Detokenizer, deltas: Sequence[TokenDelta]) -> list[TextDelta]:
        out: list[TextDelta] = []
        for delta in deltas:
            routed = role.process(TokenBatch((delta,)))
            assert set(routed) <= {"fe-1", "fe-2"}
            out += routed.get("fe-1", [])
        return out

    def test_satisfies_the_protocol(self, made: Any) -> None:
        assert isinstance(made, Detokenizer)

    def test_a_stream_becomes_its_text_with_one_terminal_delta(
            self, made: Detokenizer, model_dir: str) -> None:
        ids = self.ids(model_dir, self.text)
        info = DetokenizeInfo(owner="fe-1")
        deltas = [TokenDelta("r1", tuple(ids[:2]), detokenize=info)]
        deltas += [TokenDelta("r1", (t,)) for t in ids[2:-1]]
        deltas.append(TokenDelta("r1", (ids[-1],), finish_reason="length",
                                 prompt_tokens=3, completion_tokens=len(ids)))
        out = self.stream(made, deltas[:-1])
        assert made.active_count() == 1
        out += self.stream(made, deltas[-1:])
        assert all(d.request_id == "r1" for d in out)
        assert [d.finish_reason for d in out if d.finish_reason] == ["length"]
        assert out[-1].finish_reason == "length" and out[-1].completion_tokens == len(ids)
        assert "".join(d.text for d in out) == self.expected_text(self.text)
        assert made.active_count() == 0
        assert made.process(TokenBatch((TokenDelta("r1", (ids[0],)),))) in ({}, {"fe-1": []})

    def test_each_owner_gets_its_own_requests(self, made: Detokenizer, model_dir: str) -> None:
        ids = self.ids(model_dir, "Hello world")
        batch = TokenBatch(tuple(
            TokenDelta(rid, tuple(ids), finish_reason="stop", completion_tokens=len(ids),
                       detokenize=DetokenizeInfo(owner=owner))
            for rid, owner in (("a", "fe-1"), ("b", "fe-2"))))
        routed = made.process(batch)
        assert [d.request_id for d in routed["fe-1"]] == ["a"]
        assert [d.request_id for d in routed["fe-2"]] == ["b"]
        assert made.active_count() == 0

    def test_aborts_and_errors_end_their_requests(self, made: Detokenizer) -> None:
        error = ErrorInfo("the prompt is too long", code="context_length_exceeded")
        batch = TokenBatch((
            TokenDelta("ab", finish_reason="abort", detokenize=DetokenizeInfo(owner="fe-1")),
            TokenDelta("er", finish_reason="error", error=error,
                       detokenize=DetokenizeInfo(owner="fe-1"))))
        out = {d.request_id: d for d in made.process(batch)["fe-1"]}
        assert out["ab"].finish_reason == "abort"
        assert out["er"].finish_reason == "error" and out["er"].error == error
        assert made.active_count() == 0

    def test_close_is_idempotent(self, model_dir: str) -> None:
        role = self.build(model_dir)
        role.close()
        role.close()


class SchedulerContract(RoleContractBase):
    """What ``SchedulerLoop`` relies on: every request ends exactly once, pages come back."""

    kind = "scheduler"
    prompt: ClassVar[tuple[int, ...]] = (5, 6, 7, 8, 9, 10, 11)

    def run(self, role: Scheduler) -> dict[str, list[StepResult]]:
        """Step until idle (bounded); the results of each request in order."""
        out: dict[str, list[StepResult]] = {}
        for _ in range(MAX_STEPS):
            if not role.has_work():
                return out
            for result in role.step():
                assert isinstance(result, StepResult)
                out.setdefault(result.request_id, []).append(result)
        raise AssertionError(f"still busy after {MAX_STEPS} steps")

    def assert_idle(self, role: Scheduler) -> None:
        stats = role.stats()
        assert not role.has_work() and stats.running == 0 and stats.waiting == 0
        assert stats.pages_free == stats.pages_total > 0

    def test_satisfies_the_protocol(self, made: Any) -> None:
        assert isinstance(made, Scheduler)
        info = made.info()
        assert info["model_name"] and int(info["max_seq_len"]) > 0
        self.assert_idle(made)

    def test_every_request_ends_once_after_max_tokens(self, made: Scheduler) -> None:
        for rid, n in (("a", 3), ("b", 5), ("c", 9)):
            made.add_request(rid, self.prompt, SamplingParams(max_tokens=n, temperature=0,
                                                              ignore_eos=True))
        out = self.run(made)
        for rid, n in (("a", 3), ("b", 5), ("c", 9)):
            results = out[rid]
            assert [r.finish_reason for r in results if r.finish_reason] == ["length"]
            assert results[-1].finish_reason == "length"
            assert sum(len(r.token_ids) for r in results) == n == results[-1].completion_tokens
            assert results[-1].prompt_tokens == len(self.prompt)
        self.assert_idle(made)

    def test_a_stop_token_id_ends_the_request(self, made: Scheduler) -> None:
        greedy = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
        made.add_request("free", self.prompt, greedy)
        tokens = [t for r in self.run(made)["free"] for t in r.token_ids]
        stop = tokens[2]
        made.add_request("stopped", self.prompt,
                         SamplingParams(max_tokens=6, temperature=0, ignore_eos=True,
                                        stop_token_ids=(stop,)))
        results = self.run(made)["stopped"]
        got = [t for r in results for t in r.token_ids]
        assert results[-1].finish_reason == "stop" and got[-1] == stop and len(got) <= 3
        self.assert_idle(made)

    def test_pages_are_held_while_running_and_returned(self, made: Scheduler) -> None:
        made.add_request("a", self.prompt, SamplingParams(max_tokens=8, ignore_eos=True))
        made.step()
        stats = made.stats()
        assert stats.running == 1 and stats.pages_free < stats.pages_total
        self.run(made)
        self.assert_idle(made)

    def test_an_abort_frees_the_request_at_once(self, made: Scheduler) -> None:
        sampling = SamplingParams(max_tokens=20, ignore_eos=True)
        made.add_request("kept", self.prompt, sampling)
        made.add_request("gone", self.prompt, sampling)
        made.step()
        assert made.abort("gone") is True
        assert made.abort("gone") is False and made.abort("never-seen") is False
        out = self.run(made)
        assert "gone" not in out and out["kept"][-1].finish_reason == "length"
        self.assert_idle(made)

    def test_requests_beyond_max_running_wait_their_turn(self, model_dir: str) -> None:
        role = self.build(model_dir, max_running_requests=2)
        try:
            for i in range(5):
                role.add_request(f"r{i}", self.prompt, SamplingParams(max_tokens=4,
                                                                      ignore_eos=True))
            seen = 0
            while role.has_work() and seen < MAX_STEPS:
                role.step()
                assert role.stats().running <= 2
                seen += 1
            self.assert_idle(role)
        finally:
            role.close()

    def test_requests_that_can_never_run_are_refused(self, made: Scheduler) -> None:
        limit = int(made.info()["max_seq_len"])
        bad = [((), SamplingParams()), ((10**9,), SamplingParams()),
               (self.prompt, SamplingParams(max_tokens=limit))]
        for prompt, sampling in bad:
            with pytest.raises(Exception) as info:  # noqa: PT011 - the loop reads .code
                made.add_request("bad", prompt, sampling)
            assert getattr(info.value, "code", None), info.value
        made.add_request("dup", self.prompt, SamplingParams(max_tokens=2))
        with pytest.raises(Exception):  # noqa: B017, PT011
            made.add_request("dup", self.prompt, SamplingParams(max_tokens=2))
        self.run(made)
        self.assert_idle(made)


__all__ = ["DetokenizerContract", "SchedulerContract", "TokenizerContract"]
