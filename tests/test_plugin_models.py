"""A model architecture registered by a plugin (minisgl_register_models) is served."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from minisgl_core import hookimpl
from minisgl_core.config.launch import LaunchConfig
from minisgl_core.plugin.loading import build_manager, collect
from minisgl_core.service.launcher import LaunchError, start_service
from minisgl_core.testing.tiny import make_tiny_model
from minisgl_core.wire.schema import GenerateRequest, SamplingParams

LLAMA = "minisgl_core.engine.models.llama:LlamaForCausalLM"


class AliasModels:
    """A plugin serving a Llama-shaped checkpoint under its own architecture name."""

    @hookimpl
    def minisgl_register_models(self, register):  # noqa: ANN001, ANN201
        register("AliasLlamaForCausalLM", LLAMA)


class SecondAlias:
    @hookimpl
    def minisgl_register_models(self, register):  # noqa: ANN001, ANN201
        register("AliasLlamaForCausalLM", LLAMA)


def alias_model(tmp_path: Path) -> str:
    path = make_tiny_model(tmp_path / "alias", "llama")
    cfg = json.loads((path / "config.json").read_text())
    cfg["architectures"] = ["AliasLlamaForCausalLM"]
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


async def generate(client: object, prompt_ids: tuple[int, ...]) -> tuple[int, ...]:
    client.start()  # type: ignore[attr-defined]
    request = GenerateRequest(request_id="r1", owner="", token_ids=prompt_ids,
                              sampling=SamplingParams(max_tokens=6, temperature=0.0,
                                                      ignore_eos=True))
    ids: list[int] = []
    async for delta in client.generate(request):  # type: ignore[attr-defined]
        ids.extend(delta.token_ids)
        assert delta.error is None, delta.error
    await client.close()  # type: ignore[attr-defined]
    return tuple(ids)


def serve_once(model: str, plugins: list[object]) -> tuple[int, ...]:
    regs = collect(build_manager(autoload=False, extra=plugins))
    # no frontend plugin is loaded here: the service's one client is driven directly
    config = dataclasses.replace(LaunchConfig(), transport="inproc", frontends=("direct",),
                                 num_pages=64, max_seq_len_override=256)
    service = start_service(config, regs, model)
    try:
        (client,) = service.clients.values()
        return asyncio.run(generate(client, (1, 2, 3, 4)))
    finally:
        service.stop()


def test_a_plugin_architecture_is_served(tmp_path: Path) -> None:
    model = alias_model(tmp_path)
    assert len(serve_once(model, [AliasModels()])) == 6


def test_without_the_plugin_or_with_two_the_launch_says_why(tmp_path: Path) -> None:
    model = alias_model(tmp_path)
    with pytest.raises(LaunchError, match="unsupported model architecture 'AliasLlama"):
        serve_once(model, [])
    with pytest.raises(LaunchError, match="registered by .* and "):
        serve_once(model, [AliasModels(), SecondAlias()])
