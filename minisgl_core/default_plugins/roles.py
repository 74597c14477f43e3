"""Default plugin: the core's tokenizer, detokenizer and scheduler roles (continuous, synthetic)."""

from __future__ import annotations

from minisgl_core.plugin.hookspecs import RoleRegister, hookimpl


@hookimpl
def minisgl_register_roles(register: RoleRegister) -> None:
    """Register the HF text roles, the continuous-batching scheduler and the synthetic one."""
    register("tokenizer", "hf", "minisgl_core.service.roles:make_tokenizer")
    register("detokenizer", "hf", "minisgl_core.service.roles:make_detokenizer")
    register("scheduler", "continuous", "minisgl_core.service.roles:make_scheduler")
    register("scheduler", "synthetic", "minisgl_core.default_plugins.synthetic:make_synthetic")
