"""Factories of the core's own roles: the HF tokenizer and detokenizer, the continuous scheduler.

Each is called as ``factory(context)`` with a ``service.spec.RoleContext``; heavy imports stay
inside, so that a process imports only what its own role needs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from minisgl_core.service.spec import RoleContext

if TYPE_CHECKING:
    from minisgl_core.interfaces import Detokenizer, Scheduler, Tokenizer


def _one_thread() -> None:
    # Tokenization must not compete with the model for cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def no_options(kind: str, name: str, options: Mapping[str, Any]) -> None:
    """Refuse an options table for a role that takes none (a typo must not pass silently)."""
    if options:
        raise ValueError(f"the {kind} {name!r} takes no options, got "
                         f"[roles.{kind}.{name}] {', '.join(sorted(options))}")


def make_tokenizer(context: RoleContext) -> Tokenizer:
    """The HF tokenizer role: text or chat messages -> token ids, with the model's chat template."""
    no_options("tokenizer", "hf", context.options)
    _one_thread()
    from minisgl_core.text.tokenize import TokenizerRole

    return TokenizerRole(context.spec.model_dir, context.spec.max_context,
                         reasoning_parser=getattr(context.spec.config, "reasoning_parser", None),
                         tool_call_parser=getattr(context.spec.config, "tool_call_parser", None))


def make_detokenizer(context: RoleContext) -> Detokenizer:
    """The HF incremental detokenizer role."""
    no_options("detokenizer", "hf", context.options)
    _one_thread()
    from minisgl_core.text.detokenize import DetokenizerRole

    return DetokenizerRole(context.spec.model_dir)


def make_scheduler(context: RoleContext) -> Scheduler:
    """The engine with continuous batching over the paged KV cache."""
    no_options("scheduler", "continuous", context.options)
    import torch

    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import model_class
    from minisgl_core.service.engine_settings import engine_config

    spec = context.spec
    cls = model_class(context.models, spec.model_dir)
    torch.set_num_threads(spec.num_threads)
    cfg = spec.config
    config = engine_config(cfg, spec.model_dir, spec.num_threads)
    if cfg.tp == 1:
        return Engine(config, cls)  # which hands the heap freed while loading back to the OS
    import dataclasses

    from minisgl_core.engine.tp_rank import local_device, start_rank

    # this process is one rank; rank 0 schedules, the others follow it
    config = dataclasses.replace(config, device=local_device(config.device, spec.local_rank))
    return start_rank(config, cls, spec.tp_rank, cfg.tp, cfg.dist_addr, cfg.dist_port,
                      cfg.ready_timeout_s)
