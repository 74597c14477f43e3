"""bf16 linear layers on AMX's tile multiply straight from the HF weight ``[out, in]``
(csrc/amx/wo_amx.c loads 16 x 32 weight tiles as they lie): no packed copy, so a tied LM head keeps
sharing the embedding table, and at one row it reads the weight faster than oneDNN on it."""

from __future__ import annotations

import logging

import torch

from minisgl_core.kernels.matmul.base import Kernel
from minisgl_core.kernels.matmul.weight_only import amx_matmul, amx_run

log = logging.getLogger(__name__)


class AmxHF(Kernel):
    """AMX on the HF weight as it is (CPU with AMX, bf16)."""

    name = "amx-hf"
    layout = "hf"
    shares_weight = True

    def available(self, device: torch.device, dtype: torch.dtype) -> bool:
        if device.type != "cpu" or dtype != torch.bfloat16:
            return False
        gen = torch.Generator().manual_seed(0)
        w, x = (torch.randn(*s, generator=gen).bfloat16() for s in ((24, 40), (5, 40)))
        y = amx_matmul(x, w)
        if y is None:
            return False
        ok = torch.allclose(y, x.float() @ w.float().t(), rtol=1e-4, atol=1e-4)
        if not ok:
            log.warning("AMX bf16 kernel gives wrong results here: not used")
        return ok

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.contiguous()  # [out, in]: the same tensor when it is contiguous

    def run(self, packed: torch.Tensor, x: torch.Tensor, bias: torch.Tensor | None,
            residual: torch.Tensor | None) -> torch.Tensor:
        return amx_run(packed, x, bias, residual)
