"""The matmul and attention kernels the engine runs, and what this host lets them use.

The engine reaches the kernels only through the names below (an import-linter contract says so):
``Linear`` and ``paged_decode_attention`` are the two dispatch points; ``choose`` measures which
matmul kernel each layer runs per row bucket; ``cpu_features`` says what the CPU may be asked.
Layout (docs/architecture.md, "Adding a kernel"): ``matmul/`` the matmul kernels by family
(``dense``, ``w8a8``, ``weight_only``, ``amx``), their ``registry`` and the measured ``choice``;
``attention`` the decode attention; ``native/`` the C library and the C++ operators built from
``csrc/``; ``ops`` the custom ops a compiled graph calls; ``handles`` the names those ops use.
"""

from __future__ import annotations

from minisgl_core.kernels import cpu_features
from minisgl_core.kernels.attention import Workspace, gathered, sdpa_decode
from minisgl_core.kernels.handles import new_handle
from minisgl_core.kernels.linear import Linear
from minisgl_core.kernels.matmul import choice
from minisgl_core.kernels.matmul.base import BUCKETS, Kernel, bucket_of, padded_rows
from minisgl_core.kernels.matmul.choice import Choice, choose
from minisgl_core.kernels.matmul.dense import bf16_fast
from minisgl_core.kernels.matmul.registry import all_kernels, fp32_kernels
from minisgl_core.kernels.matmul.w8a8 import QUANTIZATIONS, role_scheme
from minisgl_core.kernels.matmul.weight_only import Int8Weight
from minisgl_core.kernels.ops import paged_decode_attention, without_collectives

__all__ = ["BUCKETS", "QUANTIZATIONS", "Choice", "Int8Weight", "Kernel", "Linear", "Workspace",
           "all_kernels", "bf16_fast", "bucket_of", "choice", "choose", "cpu_features",
           "fp32_kernels", "gathered", "new_handle", "padded_rows", "paged_decode_attention",
           "role_scheme", "sdpa_decode", "without_collectives"]
