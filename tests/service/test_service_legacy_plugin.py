"""A plugin written to the first layout's docs loads and serves in a real launched service, and
its process logs say what to change (with DeprecationWarnings shown, as a plugin author would)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import httpx

from minisgl_core.testing.service import launch_service

SAMPLE_PLUGINS = Path(__file__).resolve().parents[1] / "sample_plugins"
ARGS = ["--max-seq-len-override", "256", "--num-pages", "64", "--tokenizer", "legacy",
        "--detokenizer", "legacy"]


def test_a_plugin_of_the_first_layout_loads_and_serves(tiny_model: str, tmp_path: Path) -> None:
    with warnings.catch_warnings():  # this process's import warns too; the service's is checked
        warnings.simplefilter("ignore", DeprecationWarning)
        from legacy_plugin import LEGACY_MAX_TOKENS

    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(SAMPLE_PLUGINS),
                                                       os.environ.get("PYTHONPATH")])),
           "MINISGL_PLUGINS": "legacy_plugin", "PYTHONWARNINGS": "default::DeprecationWarning"}
    svc = launch_service(tiny_model, transport="zmq", log_dir=tmp_path, env=env, args=ARGS)
    try:
        reply = httpx.post(f"{svc.url}/v1/completions", timeout=120, json={
            "model": svc.model_name(), "prompt": "Hello", "max_tokens": 20})
        assert reply.status_code == 200, reply.text
        body = reply.json()
    finally:
        code = svc.stop()
    log = svc.log()
    assert code == 0, log[-2000:]
    # the legacy tokenizer ran: every request is cut to its few greedy tokens
    assert body["usage"]["completion_tokens"] == LEGACY_MAX_TOKENS
    assert body["choices"][0]["finish_reason"] == "length"
    for advice in ("minisgl_core.messages.GenerateRequest is deprecated and goes away in minisgl "
                   "0.3: use minisgl_core.api.GenerateRequest",
                   "use minisgl_core.api.SamplingParams",
                   "a role factory is called with a RoleContext",
                   "use context.spec.model_dir",
                   "minisgl_core.runtime.roles.make_detokenizer is deprecated"):
        assert advice in log, f"{advice!r} not in the log:\n{log[-3000:]}"
