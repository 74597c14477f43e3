"""`minisgl models` lists what the caches hold that minisgl can serve; `models rm` drops it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from minisgl_core.cli.app import make_app
from minisgl_core.plugin.loading import build_manager
from minisgl_core.testing.hub_stub import HubStub
from minisgl_core.testing.tiny_gguf import write_gguf

from .test_store_hub import resolve


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(make_app(build_manager(autoload=False)), ["models", *args])
    return result.exit_code, result.output


def test_models_lists_and_removes(hub: HubStub, tiny_dirs: dict[str, Path],
                                  tmp_path: Path) -> None:
    assert run() == (0, "no cached models (minisgl launch --model ORG/NAME fetches one)\n")
    snapshot = resolve("acme/tiny-qwen3")
    converted = resolve(str(write_gguf(tiny_dirs["llama"], tmp_path / "tiny-llama.gguf")))
    code, out = run("--json")
    assert code == 0
    listed = {m["name"]: m for m in json.loads(out)}
    assert set(listed) == {"acme/tiny-qwen3", "tiny-llama"}
    hub_entry = listed["acme/tiny-qwen3"]
    assert hub_entry["kind"] == "hub" and hub_entry["architecture"] == "Qwen3ForCausalLM"
    assert hub_entry["detail"] == snapshot.name[:12]
    blobs = snapshot.parent.parent / "blobs"
    assert hub_entry["size_bytes"] == sum(p.stat().st_size for p in blobs.iterdir())
    assert listed["tiny-llama"]["path"] == str(converted)
    assert listed["tiny-llama"]["architecture"] == "LlamaForCausalLM"
    code, table = run()
    assert code == 0 and table.splitlines()[0].split()[:4] == ["name", "kind", "architecture",
                                                               "size"]
    code, out = run("rm", "acme/tiny-qwen3")
    assert code == 0 and out.startswith("removed acme/tiny-qwen3 (hub, ")
    assert not snapshot.exists()
    code, out = run("rm", "acme/tiny-qwen3")
    assert code == 1
    assert out == "minisgl: error: no cached model 'acme/tiny-qwen3' (cached: tiny-llama)\n"
    assert run("rm", "tiny-llama")[0] == 0 and not converted.exists()
