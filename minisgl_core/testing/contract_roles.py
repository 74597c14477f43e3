"""Role contracts: the behaviour every tokenizer and detokenizer role promises (the scheduler's
is in ``contract_scheduler``), and the base that builds a role as a worker does.

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

from minisgl_core.interfaces import Detokenizer, Tokenizer, TokenizerCalls
from minisgl_core.rejection import RequestRejected
from minisgl_core.wire.schema import (
    ChatMessage,
    DetokenizeCall,
    DetokenizeInfo,
    ErrorInfo,
    GenerateRequest,
    SamplingParams,
    TextDelta,
    TokenBatch,
    TokenDelta,
    TokenizeCall,
    TokenizedRequest,
)


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
        from minisgl_core.config.launch import LaunchConfig
        from minisgl_core.plugin.loading import build_manager, collect
        from minisgl_core.service.launcher import max_context
        from minisgl_core.service.spec import Endpoints, RoleContext, WorkerSpec

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

    def test_tokenize_calls_show_what_tokenize_sends(self, made: Tokenizer) -> None:
        if not isinstance(made, TokenizerCalls):
            pytest.skip("this role answers no tokenize calls (EngineClient.tokenize)")
        chat = _request(messages=(ChatMessage("user", "Hello"),))
        reply = made.tokenize_call(TokenizeCall("c1", "fe-1", chat, token_strs=True))
        assert reply.call_id == "c1" and reply.error is None
        assert reply.token_ids == made.tokenize(chat).prompt_ids
        assert reply.token_strs is not None and len(reply.token_strs) == len(reply.token_ids)
        text = made.detokenize_call(DetokenizeCall("c2", "fe-1", reply.token_ids))
        assert text.call_id == "c2" and "hello" in text.text.lower()
        with pytest.raises(RequestRejected):
            made.detokenize_call(DetokenizeCall("c3", "fe-1", (10**9,)))

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


__all__ = ["DetokenizerContract", "RoleContractBase", "TokenizerContract"]
