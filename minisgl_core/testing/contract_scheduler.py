"""SchedulerContract: the behaviour every scheduler role promises, as a pytest class.

Subclass it as the other role contracts (``contract_roles``)::

    class TestAcmeScheduler(SchedulerContract):
        role = "acme"
        plugins = ["minisgl_acme"]

Every loop is bounded; nothing asserts on timing.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from minisgl_core.interfaces import Scheduler, StepResult
from minisgl_core.rejection import RequestRejected
from minisgl_core.testing.contract_roles import RoleContractBase
from minisgl_core.wire.schema import SamplingParams

MAX_STEPS = 2000  # every scheduler loop here is bounded


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
        for prompt, sampling in bad:  # the Protocol's one error, with a code for programs
            with pytest.raises(RequestRejected) as info:
                made.add_request("bad", prompt, sampling)
            assert info.value.code, info.value
        made.add_request("dup", self.prompt, SamplingParams(max_tokens=2))
        with pytest.raises(RequestRejected):
            made.add_request("dup", self.prompt, SamplingParams(max_tokens=2))
        self.run(made)
        self.assert_idle(made)


__all__ = ["SchedulerContract"]
