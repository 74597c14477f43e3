"""The rows a step hands its LM head. A model that splits ``logits`` into ``final_norm`` and
``head`` (every architecture the engine ships) has the final norm run with the forward: inside
a compiled decode step's graph, where inductor fuses it with the last layer's code, instead of
the eager pass and the Python around it after the graph (design/kernels.md, 12). A model that
does not (a plugin's own class with ``forward`` and ``logits`` alone) hands ``logits`` its
forward's rows as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def head_rows(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``hidden [T, H]`` from the model's forward -> the rows ``head_of(model)`` takes."""
    norm = getattr(model, "final_norm", None)
    return hidden if norm is None else norm(hidden)


def forward_rows(model: Any, input_ids: torch.Tensor, meta: Any, kv: Any,
                 ws: Any) -> torch.Tensor:
    """The model's forward, ``input_ids [T]`` -> the rows its LM head takes ``[T, H]``: the
    step's forward wherever it runs (eager, or traced into a compiled decode graph)."""
    return head_rows(model, model.forward(input_ids, meta, kv, ws))


def head_of(model: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """What turns ``head_rows``'s rows into logits ``[N, V]``: the model's ``head`` where it has
    a ``final_norm``, else its ``logits``."""
    return model.head if getattr(model, "final_norm", None) is not None else model.logits
