"""The engine's configuration from a launch config: what the scheduler runs, also built by
`minisgl bench compare`'s offline engine so that it runs what the service runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minisgl_core.config.launch import LaunchConfig
    from minisgl_core.engine.config import EngineConfig


def engine_config(cfg: LaunchConfig, model_dir: str, num_threads: int) -> EngineConfig:
    """The EngineConfig of ``cfg``'s engine settings; a setting left None is the engine's
    default, but ``compile`` None is auto (on where the configuration has it)."""
    from minisgl_core.engine.config import EngineConfig

    fields = {
        "model": model_dir,
        "dtype": cfg.dtype,
        "device": cfg.device,
        "num_pages": cfg.num_pages,
        "page_size": cfg.page_size,
        "max_seq_len_override": cfg.max_seq_len_override,
        "max_running_requests": cfg.max_running_requests,
        "max_prefill_tokens": cfg.max_prefill_tokens,
        "num_threads": num_threads,
        "cache": cfg.cache,
        "quantization": getattr(cfg, "quantization", None),
        "speculative": getattr(cfg, "speculative", None),
        "num_speculative_tokens": getattr(cfg, "num_speculative_tokens", None),
        "prompt_lookup_min": getattr(cfg, "prompt_lookup_min", None),
        "prompt_lookup_max": getattr(cfg, "prompt_lookup_max", None),
        "deterministic": getattr(cfg, "deterministic", None),
        "prefix_cache_dir": getattr(cfg, "prefix_cache_dir", None),
        "prefix_cache_disk_gb": getattr(cfg, "prefix_cache_disk_gb", None),
        "load_format": getattr(cfg, "load_format", None),
        "kv_cache_dtype": getattr(cfg, "kv_cache_dtype", None),
    }
    return EngineConfig(**{k: v for k, v in fields.items() if v is not None},
                        compile=getattr(cfg, "compile", None))
