"""Start one tensor-parallel rank: check the split, join the group, agree on settings, build.

The scheduler process of each rank calls ``start_rank``; ``minisgl tp-worker``
(``service.tp_worker``) runs a rank > 0 on another host. Rank 0's engine settings (KV pages,
page size, context...) are sent to the others, so a remote rank needs only the model and the
group's address.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from minisgl_core.engine import quantization_choice
from minisgl_core.engine.config import EngineConfig, ModelConfig
from minisgl_core.engine.engine import Engine
from minisgl_core.engine.kv_cache import default_num_pages
from minisgl_core.engine.parallel import check_tp, init_tensor_parallel, shard

log = logging.getLogger(__name__)

# EngineConfig fields every rank must share (rank 0's win); device and threads stay local
SHARED = ("dtype", "num_pages", "page_size", "max_seq_len_override", "max_running_requests",
          "max_prefill_tokens", "seed", "cache", "quantization", "kv_cache_dtype", "compile")
MODEL_FACTS = ("architecture", "vocab_size", "hidden_size", "intermediate_size", "num_layers",
               "num_heads", "num_kv_heads", "head_dim")


def local_device(device: str, local_rank: int) -> str:
    """``cuda`` -> ``cuda:<local rank>`` (one GPU per rank on a host); others unchanged."""
    return f"cuda:{local_rank}" if device == "cuda" else device


def _facts(cfg: ModelConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in MODEL_FACTS}


def start_rank(config: EngineConfig, model_class: Any, rank: int, size: int, addr: str,
               port: int, timeout_s: float = 300.0) -> Engine:
    """This process's Engine as rank ``rank`` of ``size``, once every rank has joined;
    ``config.model`` is a resolved directory and ``model_class`` its architecture's class."""
    path = Path(config.model)
    cfg = ModelConfig.from_dir(path)
    check_tp(cfg.num_heads, cfg.num_kv_heads, size)  # fail before anyone waits for us
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    log.info("tensor-parallel rank %d/%d joining %s:%d", rank, size, addr, port)
    tp = init_tensor_parallel(addr, port, rank, size, torch.device(config.device), timeout_s)
    try:
        settings: dict[str, Any] | None = None
        quantization_reason: str | None = None
        if tp.leader:
            from minisgl_core.engine.dtype_choice import resolve

            # "auto" chosen once, here: every rank runs this scheme and this dtype
            config, quantization_reason = quantization_choice.resolve_why(config)
            config = resolve(config)
            max_seq = config.max_seq_len_override or cfg.max_position_embeddings
            kv_heads = shard(cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size, size, 0).num_kv
            pages = config.num_pages or default_num_pages(config, cfg, kv_heads, max_seq)
            config = dataclasses.replace(config, num_pages=pages)
            settings = {"engine": {k: getattr(config, k) for k in SHARED}, "model": _facts(cfg)}
        settings = tp.broadcast_json(settings)
        assert settings is not None
        if not tp.leader:
            if settings["model"] != _facts(cfg):
                raise ValueError(f"rank {rank}'s model {path} differs from rank 0's: "
                                 f"{_facts(cfg)} != {settings['model']}")
            config = dataclasses.replace(config, **settings["engine"])
        engine = Engine(config, model_class, tp)
        if quantization_reason is not None:  # the engine saw the scheme chosen here, not why
            engine.quantization_reason = quantization_reason
        ok = tp.all_reduce(torch.ones(1, device=tp.device))  # every rank built its shard
        if int(ok.item()) != size:
            raise RuntimeError(f"only {int(ok.item())} of {size} ranks started")
    except BaseException:
        tp.close()
        raise
    log.info("tensor-parallel rank %d/%d ready: %d KV heads, %d KV pages", rank, size,
             engine.model.num_kv_heads, engine.num_pages)
    return engine
