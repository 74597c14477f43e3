"""Factories of the core's own roles: the HF tokenizer and detokenizer, the continuous scheduler."""

from __future__ import annotations

import os
from typing import Any

from minisgl_core.runtime.spec import WorkerSpec


def _one_thread() -> None:
    # Tokenization must not compete with the model for cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def make_tokenizer(spec: WorkerSpec) -> Any:
    """The HF tokenizer role: text or chat messages -> token ids, with the model's chat template."""
    _one_thread()
    from minisgl_core.text.tokenize import TokenizerRole

    return TokenizerRole(spec.model_dir, spec.max_context,
                         vocab_size=spec.extra.get("vocab_size"))


def make_detokenizer(spec: WorkerSpec) -> Any:
    """The HF incremental detokenizer role."""
    _one_thread()
    from minisgl_core.text.detokenize import DetokenizerRole

    return DetokenizerRole(spec.model_dir)


def make_scheduler(spec: WorkerSpec) -> Any:
    """The engine with continuous batching over the paged KV cache."""
    import torch

    from minisgl_core.engine.engine import Engine, EngineConfig

    torch.set_num_threads(spec.num_threads)
    cfg = spec.config
    fields = {
        "model": spec.model_dir,
        "dtype": cfg.dtype,
        "device": cfg.device,
        "num_pages": cfg.num_pages,
        "page_size": cfg.page_size,
        "max_seq_len_override": cfg.max_seq_len_override,
        "max_running_requests": cfg.max_running_requests,
        "max_prefill_tokens": cfg.max_prefill_tokens,
        "num_threads": spec.num_threads,
        "cache": cfg.cache,
        "quantization": getattr(cfg, "quantization", None),
    }
    config = EngineConfig(**{k: v for k, v in fields.items() if v is not None})
    tp = getattr(cfg, "tp", 1)
    if tp == 1:
        return Engine(config)
    import dataclasses

    from minisgl_core.engine.tp_rank import local_device, start_rank

    # this process is one rank; rank 0 schedules, the others follow it
    config = dataclasses.replace(config, device=local_device(config.device, spec.local_rank))
    return start_rank(config, spec.tp_rank, tp, cfg.dist_addr, cfg.dist_port,
                      cfg.ready_timeout_s)
