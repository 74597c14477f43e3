"""The matmul and attention kernels the engine runs, and what this host lets them use.

The engine reaches the kernels only through the names below (an import-linter contract says so):
``Linear`` and ``paged_decode_attention`` are the two dispatch points; ``choose`` measures which
matmul kernel each layer runs per row bucket; ``cpu_features`` says what the CPU may be asked;
``invariant`` holds the batch-invariant attention and ops of ``--deterministic``.
Layout (docs/architecture.md, "Adding a kernel"): ``matmul/`` the matmul kernels by family
(``dense``, ``w8a8``, ``weight_only``, ``amx``), their ``registry`` and the measured ``choice``;
``attention`` the decode attention; ``prefill_attention`` a prefill chunk's; ``kv_int8`` the
int8 KV cache's rows; ``native/`` the C library and the C++ operators built from ``csrc/``;
``ops`` the custom ops a compiled graph calls; ``handles`` the names those ops use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # read by type checkers and the import contracts; resolved lazily below
    from minisgl_core.kernels import cpu_features, elementwise, kv_int8, prefill_attention
    from minisgl_core.kernels.attention import Workspace, gathered, sdpa_decode
    from minisgl_core.kernels.cpu_features import vector_code_kind
    from minisgl_core.kernels.linear import Linear, model_linears, model_weight_bytes
    from minisgl_core.kernels.matmul import choice
    from minisgl_core.kernels.matmul.base import BUCKETS, Kernel, bucket_of, padded_rows
    from minisgl_core.kernels.matmul.choice import Choice, choose
    from minisgl_core.kernels.matmul.dense import bf16_fast
    from minisgl_core.kernels.matmul.registry import all_kernels, fp32_kernels
    from minisgl_core.kernels.matmul.w8a8 import role_scheme
    from minisgl_core.kernels.matmul.weight_only import Int8Weight
    from minisgl_core.kernels.ops import (
        new_handle,
        paged_decode_attention,
        python_ops_in_graphs,
        without_collectives,
    )
    from minisgl_core.kernels.schemes import QUANTIZATIONS

# name -> the module that defines it (a module's own name: the module itself). The custom ops
# are registered when kernels.ops is imported: every name the engine uses while it is built
# (Linear, new_handle, paged_decode_attention) imports it, so no op is registered later, from a
# thread compiling a graph while another runs the model.
_WHERE = {
    "cpu_features": "minisgl_core.kernels.cpu_features",
    "vector_code_kind": "minisgl_core.kernels.cpu_features",
    "invariant": "minisgl_core.kernels.invariant",  # --deterministic's attention and ops
    "elementwise": "minisgl_core.kernels.elementwise",  # the eager step's norms, rotary, SwiGLU
    "kv_int8": "minisgl_core.kernels.kv_int8",
    "prefill_attention": "minisgl_core.kernels.prefill_attention",  # a prefill chunk's, native
    "choice": "minisgl_core.kernels.matmul.choice",
    "Workspace": "minisgl_core.kernels.attention", "gathered": "minisgl_core.kernels.attention",
    "sdpa_decode": "minisgl_core.kernels.attention",
    "new_handle": "minisgl_core.kernels.ops",  # with the ops its handles are for
    "Linear": "minisgl_core.kernels.linear",
    "model_linears": "minisgl_core.kernels.linear",
    "model_weight_bytes": "minisgl_core.kernels.linear",
    "BUCKETS": "minisgl_core.kernels.matmul.base", "Kernel": "minisgl_core.kernels.matmul.base",
    "bucket_of": "minisgl_core.kernels.matmul.base",
    "padded_rows": "minisgl_core.kernels.matmul.base",
    "Choice": "minisgl_core.kernels.matmul.choice", "choose": "minisgl_core.kernels.matmul.choice",
    "bf16_fast": "minisgl_core.kernels.matmul.dense",
    "all_kernels": "minisgl_core.kernels.matmul.registry",
    "fp32_kernels": "minisgl_core.kernels.matmul.registry",
    "role_scheme": "minisgl_core.kernels.matmul.w8a8",
    "Int8Weight": "minisgl_core.kernels.matmul.weight_only",
    "paged_decode_attention": "minisgl_core.kernels.ops",
    "without_collectives": "minisgl_core.kernels.ops",
    "python_ops_in_graphs": "minisgl_core.kernels.ops",
    "QUANTIZATIONS": "minisgl_core.kernels.schemes",
}
__all__ = ["BUCKETS", "QUANTIZATIONS", "Choice", "Int8Weight", "Kernel", "Linear", "Workspace",
           "all_kernels", "bf16_fast", "bucket_of", "choice", "choose", "cpu_features",
           "elementwise", "fp32_kernels", "gathered", "invariant", "kv_int8", "new_handle",
           "model_linears", "model_weight_bytes", "padded_rows", "paged_decode_attention",
           "prefill_attention", "python_ops_in_graphs", "role_scheme", "sdpa_decode",
           "vector_code_kind", "without_collectives"]


def __getattr__(name: str) -> Any:
    # torch-free callers (the config, the CLI: cpu_features, schemes) import this package too:
    # each name's module is imported when the name is first asked for
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'minisgl_core.kernels' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if module.rpartition(".")[2] == name else getattr(loaded, name)
    globals()[name] = value
    return value
