"""The role contracts, run against the core's own roles: hf text roles, both schedulers."""

from __future__ import annotations

from minisgl_core.testing import DetokenizerContract, SchedulerContract, TokenizerContract


class TestHFTokenizer(TokenizerContract):
    role = "hf"


class TestHFDetokenizer(DetokenizerContract):
    role = "hf"


class TestContinuousScheduler(SchedulerContract):
    role = "continuous"


class TestSyntheticScheduler(SchedulerContract):
    role = "synthetic"
