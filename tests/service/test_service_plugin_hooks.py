"""A plugin module named in MINISGL_PLUGINS reaches every process of a real service, and its
configure / unconfigure hooks run once in each, with the config's table for it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from minisgl_core.testing.service import launch_service

HERE = Path(__file__).resolve().parent
ARGS = ["--max-seq-len-override", "256", "--num-pages", "64"]


def _calls(probe: Path, hook: str) -> list[tuple[str, int, str]]:
    out = []
    for line in probe.read_text().splitlines():
        name, process, pid, tag = line.split()
        if name == hook:
            out.append((process, int(pid), tag))
    return sorted(out)


def test_configure_runs_once_in_every_process(tiny_model: str, tmp_path: Path) -> None:
    probe = tmp_path / "probe.log"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
           "MINISGL_PLUGINS": "probe_plugin", "MINISGL_PROBE_FILE": str(probe)}
    svc = launch_service(tiny_model, transport="zmq", log_dir=tmp_path, env=env,
                         args=[*ARGS, "-s", "plugins.probe_plugin.tag=t7"])
    try:
        pids = {"launcher": svc.proc.pid, **{r: p.pid for r, p in svc.workers().items()}}
        assert sorted(pids) == ["detokenizer", "launcher", "scheduler", "tokenizer"]
        want = sorted((process, pid, "t7") for process, pid in pids.items())
        assert _calls(probe, "configure") == want  # once each, before the service was ready
        assert _calls(probe, "unconfigure") == []
    finally:
        code = svc.stop(signal.SIGTERM)
    assert code == 0, svc.log()[-2000:]
    assert _calls(probe, "unconfigure") == want
