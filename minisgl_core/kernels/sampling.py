"""The sampler's full-vocabulary passes (csrc/sampling.c): each row's argmax, and one draw per row
from the tempered softmax cut by top-k, top-p and min-p, by inverse CDF at a given uniform.

The native passes run on the CPU where the library is built; elsewhere (CUDA, no compiler, or
``MINISGL_SAMPLING=torch``) the torch ops below compute the same: the draw is the same inverse
CDF at the same ``u``, so a seeded request draws the same tokens either way, up to rounding where
``u`` falls within float error of a boundary between two tokens.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from minisgl_core.kernels.native import labelled
from minisgl_core.kernels.native import library as native

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
# the native calls' name in a profile (bench/profile.py counts it as sampling)
LABEL = "minisgl::sample"


def _switched_on() -> bool:
    """The library built, and the native passes not switched off (``MINISGL_SAMPLING=torch``)."""
    return (os.environ.get("MINISGL_SAMPLING", "native") != "torch"
            and native.library() is not None)


def native_usable(logits: torch.Tensor) -> bool:
    """Whether the native passes take ``logits [N, V]``: CPU, fp32 or bf16, the library built,
    and not switched off (``MINISGL_SAMPLING=torch``)."""
    return (logits.device.type == "cpu" and logits.dtype in _DTYPES and logits.dim() == 2
            and _switched_on())


def _torch_argmax(logits: torch.Tensor) -> list[int]:
    # max(-1).indices: on CPU 2.5x faster than argmax at [32, 49152]
    return logits.max(-1).indices.tolist()  # type: ignore[no-any-return]


def argmax_on(device: torch.device) -> Callable[[torch.Tensor], list[int]]:
    """``argmax`` for logits on ``device``, with whether the native pass runs there decided now,
    once: a sampler's argmax follows a step's weights' pass, where the environment's lookup and
    the device's alone took some 30 us a call (2-core Zen 5)."""
    if device.type != "cpu" or not _switched_on():
        return _torch_argmax
    lib, isa = native.library(), native.best_isa()
    assert lib is not None

    def run(logits: torch.Tensor) -> list[int]:
        code = _DTYPES.get(logits.dtype)
        if code is None or logits.dim() != 2:
            return _torch_argmax(logits)
        return _native_argmax(lib, logits, code, isa)

    return run


def argmax(logits: torch.Tensor, isa: int | None = None) -> list[int]:
    """The index of each row's largest value, the first of equal ones: ``[N, V] -> N ints``;
    torch's ``max(-1).indices`` where the native pass does not run."""
    if not native_usable(logits):
        return _torch_argmax(logits)
    lib = native.library()
    assert lib is not None
    return _native_argmax(lib, logits, _DTYPES[logits.dtype],
                          native.best_isa() if isa is None else isa)


def _native_argmax(lib: Any, logits: torch.Tensor, code: int, isa: int) -> list[int]:
    x = logits if logits.is_contiguous() else logits.contiguous()
    n, v = x.shape
    out = torch.empty(n, dtype=torch.int64)
    labelled.call(LABEL, lib.argmax_rows, x.data_ptr(), n, v, code, out.data_ptr(), isa)
    return out.tolist()  # type: ignore[no-any-return]


def draw(logits: torch.Tensor, temperature: Sequence[float], top_k: Sequence[int],
         top_p: Sequence[float], min_p: Sequence[float], u: torch.Tensor,
         isa: int | None = None) -> list[int] | None:
    """One token per row of ``logits [N, V]`` from softmax(row / temperature) cut by top-k (0:
    none), top-p (1: none) and min-p (0: none), at ``u [N]`` float64 in [0, 1); None where the
    native pass does not run (``probabilities`` and ``draw_from`` then do it in torch)."""
    if not native_usable(logits):
        return None
    lib = native.library()
    assert lib is not None
    x = logits.float().contiguous()
    n, v = x.shape
    temps = torch.tensor(temperature, dtype=torch.float32)
    ks = torch.tensor(top_k, dtype=torch.int32)
    ps = torch.tensor(top_p, dtype=torch.float32)
    mins = torch.tensor(min_p, dtype=torch.float32)
    us = u.to(torch.float64).contiguous()
    out = torch.empty(n, dtype=torch.int64)
    done = labelled.call(LABEL, lib.sample_rows, x.data_ptr(), n, v, temps.data_ptr(),
                         ks.data_ptr(), ps.data_ptr(), mins.data_ptr(), us.data_ptr(),
                         out.data_ptr(), native.best_isa() if isa is None else isa)
    return out.tolist() if done == 0 else None


def probabilities(logits: torch.Tensor, temperature: Sequence[float], top_k: Sequence[int],
                  top_p: Sequence[float], min_p: Sequence[float]) -> torch.Tensor:
    """What row i of ``logits [N, V]`` is drawn from, unnormalised where tokens were cut:
    ``[N, V]`` float. Top-k and top-p keep a prefix of the row sorted by probability (a token
    stays when fewer than k rank above it and the mass above it is below p), min-p then drops
    tokens below min_p times the largest probability."""
    n, v = logits.shape
    dev = logits.device
    temps = torch.tensor(list(temperature), device=dev).unsqueeze(1)
    probs = torch.softmax(logits / temps, dim=-1)  # [N, V]
    if any(k > 0 for k in top_k) or any(p < 1.0 for p in top_p):
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
        ks = torch.tensor([k if k > 0 else v for k in top_k], device=dev).unsqueeze(1)
        remove = torch.arange(v, device=dev).unsqueeze(0) >= ks
        ps = torch.tensor([p if p < 1.0 else 2.0 for p in top_p], device=dev).unsqueeze(1)
        remove |= (sorted_p.cumsum(-1) - sorted_p) >= ps
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p.masked_fill(remove, 0.0))
    if any(m > 0 for m in min_p):
        mp = torch.tensor(list(min_p), device=dev).unsqueeze(1)
        probs = probs.masked_fill(probs < mp * probs.amax(-1, keepdim=True), 0.0)
    return probs


def draw_from(probs: torch.Tensor, u: torch.Tensor) -> list[int]:
    """Inverse CDF: per row of ``probs [N, V]`` (unnormalised, >= 0), the first token whose
    running sum passes ``u [N]`` times the row's sum; never a token of probability 0."""
    cdf = probs.double().cumsum(-1)  # [N, V]
    total = cdf[:, -1:]
    # strictly below the total: the search then lands on a token that adds to the sum
    target = torch.minimum(u.to(cdf).unsqueeze(1) * total, torch.nextafter(total, total * 0))
    return torch.searchsorted(cdf, target, right=True).squeeze(1).tolist()  # type: ignore[no-any-return]
