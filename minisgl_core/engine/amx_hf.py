"""bf16 linear layers on AMX's tile multiply straight from the HF weight ``[out, in]``
(csrc/wo_amx.c loads 16 x 32 weight tiles as they lie): no packed copy, so a tied LM head keeps
sharing the embedding table, and at one row it reads the weight faster than oneDNN on it."""

from __future__ import annotations

import logging

import torch

from minisgl_core.engine import native
from minisgl_core.engine.linear import Kernel
from minisgl_core.engine.quant import _add

log = logging.getLogger(__name__)


def amx_bf16_matmul(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """``x [T, in] bf16 @ w [out, in] bf16 .T (+ residual)`` -> ``[T, out]`` in ``dtype`` (fp32
    or bf16: summed in fp32, rounded once); None where the library or the CPU has no AMX."""
    lib = native.library()
    if lib is None or not lib.wo_has_amx() or x.dtype != torch.bfloat16:
        return None
    x = x.contiguous()
    res = None if residual is None else residual.to(dtype).contiguous()
    y = torch.empty(x.shape[0], w.shape[0], dtype=dtype)
    done = lib.wo_amx_bf16(x.data_ptr(), x.shape[0], x.shape[1], w.data_ptr(), w.shape[0],
                           y.data_ptr(), int(dtype == torch.bfloat16),
                           None if res is None else res.data_ptr(), torch.get_num_threads())
    return y if done == 0 else None


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
        y = amx_bf16_matmul(x, w)
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
        fused = residual if bias is None else None  # summed in the kernel, rounded once
        y = amx_bf16_matmul(x, packed, fused, x.dtype)
        assert y is not None, "the AMX kernel ran where available() said it could not"
        return y if fused is not None else _add(y, bias, residual)
