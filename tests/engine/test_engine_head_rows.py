"""The final norm runs with the forward (inside a compiled step's graph) for the models that split
``logits`` into ``final_norm`` and ``head``; a model class with ``logits`` alone (a plugin's)
still serves, its forward's rows going to ``logits`` whole."""

from __future__ import annotations

import random

import torch

from minisgl_core.engine.attention import build_metadata
from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.engine.head_rows import head_of, head_rows
from minisgl_core.engine.models.llama import LlamaForCausalLM
from minisgl_core.plugin.model_lookup import resolve
from minisgl_core.testing.compiled_runs import compiled_runs
from minisgl_core.wire.schema import SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


class LogitsOnly(LlamaForCausalLM):
    """A model class as a plugin may write it: ``forward`` and ``logits``, no split."""

    final_norm = None  # type: ignore[assignment]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.nn.functional.rms_norm(
            hidden, (hidden.shape[-1],), self.norm, self.cfg.rms_norm_eps))


def test_the_engine_hands_the_head_normed_rows_or_logits_the_forwards(make_engine,
                                                                      tiny_models) -> None:
    engine = make_engine("llama", page_size=4)
    model = engine.model
    assert head_of(model) == model.head
    hidden = torch.randn(3, model.cfg.hidden_size)
    rows = head_rows(model, hidden)
    assert torch.allclose(model.head(rows), model.logits(hidden), atol=1e-6)
    resolved = resolve(str(tiny_models["llama"]))
    plain = Engine(EngineConfig(model=resolved.path, num_threads=1, dtype="float32",
                                page_size=4), LogitsOnly)
    assert head_of(plain.model) == plain.model.logits
    assert head_rows(plain.model, hidden) is hidden
    # the same greedy tokens either way
    prompt = [random.Random(3).randrange(3, engine.vocab_size) for _ in range(7)]
    tokens = []
    for e in (engine, plain):
        e.add_request("a", prompt, GREEDY)
        tokens.append([t for o in e.run_until_idle() for t in o.token_ids])
    assert tokens[0] == tokens[1] and len(tokens[0]) == GREEDY.max_tokens


def test_a_compiled_steps_rows_are_the_final_norms(make_engine) -> None:
    engine = make_engine("llama", page_size=4, compile=True)
    assert engine.compiled is not None and engine.compiled.wait(600)
    engine.add_request("a", [5, 6, 7, 8, 9, 10], GREEDY)
    engine.step()  # the prefill
    (r,) = engine.batcher.running
    with torch.inference_mode():  # as in Engine.step: the graphs guard on inference tensors
        meta = build_metadata([(r.pages, r.num_cached + 1)], [], engine.page_size,
                              engine.device)
        ids = torch.tensor([r.output_ids[-1]])
        graphs, graph_rows = compiled_runs(lambda: engine.forward(ids, meta, engine.kv,
                                                                  engine.workspace))
        want = engine.model.final_norm(engine.model.forward(ids, meta, engine.kv,
                                                            engine.workspace))
    assert sum(graphs.values()) == 1  # the rows came out of the one-request graph
    assert torch.allclose(graph_rows, want, atol=1e-5, rtol=1e-5)
    list(engine.run_until_idle())
