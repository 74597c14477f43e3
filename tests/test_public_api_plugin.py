"""A plugin that imports only minisgl_core.api passes every contract suite: the transport's and
the three roles'."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import public_api_plugin
import pytest

from minisgl_core.api import (
    DetokenizerContract,
    SchedulerContract,
    TokenizerContract,
    TransportContract,
    private_run_dir,
)

PLUGIN = ("public_api_plugin",)


class TestCountedTransport(TransportContract):
    transport = public_api_plugin.NAME
    plugins = PLUGIN


class TestCountedTokenizer(TokenizerContract):
    role = public_api_plugin.NAME
    plugins = PLUGIN


class TestCountedDetokenizer(DetokenizerContract):
    role = public_api_plugin.NAME
    plugins = PLUGIN


class TestCountedScheduler(SchedulerContract):
    role = public_api_plugin.NAME
    plugins = PLUGIN

    def test_the_wrapper_is_what_runs(self, made: Any) -> None:
        made.add_request("w", self.prompt, public_api_plugin.SamplingParams(max_tokens=2))
        out = self.run(made)
        assert made.steps >= 2 and sum(len(r.token_ids) for r in out["w"]) == 2


def test_the_transport_counts_what_it_opens() -> None:
    transport = public_api_plugin.CountedTransport()
    try:
        with private_run_dir() as run_dir:
            ep = transport.endpoint(run_dir, "count")
            rx, tx = transport.pull(ep, bind=True), transport.push(ep)
            tx.send(b"x")
            assert rx.recv(timeout=30) == b"x" and transport.opened == 2
    finally:
        transport.close()


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "third_party_plugin"
ONLY_PUBLIC = [Path(public_api_plugin.__file__), *sorted(EXAMPLE.rglob("*.py"))]


@pytest.mark.parametrize("path", ONLY_PUBLIC, ids=lambda p: p.name)
def test_this_plugin_and_the_example_import_only_the_public_api(path: Path) -> None:
    tree = ast.parse(path.read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    modules |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for a in node.names}
    core = {m for m in modules if m and m.split(".")[0] == "minisgl_core"}
    assert core <= {"minisgl_core.api"}, f"{path} imports {sorted(core)}"
