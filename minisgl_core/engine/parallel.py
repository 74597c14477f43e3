"""Tensor parallelism: the process group, how heads and MLP columns are split, step broadcasts.

Rank 0 runs the scheduler; before each forward it broadcasts the step's inputs (token ids and the
pages/lengths build_metadata needs) as one int64 tensor, and every rank runs the same forward on
its shard. Attention is split by KV-head groups (each rank keeps whole GQA groups: its KV heads
and the query heads that read them), the MLP by contiguous intermediate columns; the partial
outputs of o_proj and down_proj are summed with all_reduce. gloo on CPU, nccl on CUDA.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from minisgl_core.engine.shm_allreduce import ShmAllReduce
from minisgl_core.kernels import new_handle

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Collectives wait this long: a follower blocks in a broadcast for as long as the service idles.
# A dead peer is noticed sooner anyway (its sockets close).
COLLECTIVE_TIMEOUT = timedelta(days=365)
STOP = -1  # the length rank 0 broadcasts instead of a step: leave the follow loop

StepInputs = tuple[list[int], list[tuple[list[int], int]], list[tuple[list[int], int, int]]]


def split(n: int, size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of rank's share of n items; the first ``n % size`` ranks get one more."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


@dataclass(frozen=True)
class Shard:
    """One rank's slice of a layer: query heads, KV heads and intermediate columns."""

    q_heads: tuple[int, int]  # [start, stop) of the query heads
    kv_heads: tuple[int, int]
    inter: tuple[int, int]  # [start, stop) of the MLP intermediate columns

    @property
    def num_q(self) -> int:
        return self.q_heads[1] - self.q_heads[0]

    @property
    def num_kv(self) -> int:
        return self.kv_heads[1] - self.kv_heads[0]

    @property
    def num_inter(self) -> int:
        return self.inter[1] - self.inter[0]


def check_tp(num_heads: int, num_kv_heads: int, size: int) -> None:
    """ValueError unless ``size`` ranks can each hold at least one whole KV-head group."""
    if size < 1:
        raise ValueError(f"tp must be at least 1, got {size}")
    if size > num_kv_heads:
        raise ValueError(f"--tp {size} is more than this model's {num_kv_heads} KV heads: each "
                         f"rank needs at least one (use --tp {num_kv_heads} or less)")
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads do not divide into {num_kv_heads} KV groups")


def shard(num_heads: int, num_kv_heads: int, intermediate: int, size: int, rank: int) -> Shard:
    """Rank's shard; uneven counts are fine (3 KV heads over 2 ranks: 2 and 1)."""
    check_tp(num_heads, num_kv_heads, size)
    group = num_heads // num_kv_heads
    k0, k1 = split(num_kv_heads, size, rank)
    return Shard((k0 * group, k1 * group), (k0, k1), split(intermediate, size, rank))


def _loopback_ifname() -> str | None:
    for _, name in socket.if_nameindex():
        if name.startswith("lo"):
            return name
    return None


class TensorParallel:
    """This process's place in the group: rank, size, the device collectives run on."""

    def __init__(self, rank: int, size: int, device: torch.device) -> None:
        self.rank, self.size, self.device = rank, size, device
        self.shm: ShmAllReduce | None = None  # set when every rank shares this host (CPU)
        self.handle = new_handle(self)  # what a compiled graph calls it by

    @property
    def leader(self) -> bool:
        """Rank 0: the one that schedules, samples and talks to the rest of the service."""
        return self.rank == 0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks in place and return it (no-op at size 1)."""
        if torch.compiler.is_compiling():  # traced: the same collective, behind an opaque op
            torch.ops.minisgl.all_reduce(x, self.handle)
            return x
        return self.all_reduce_eager(x)

    def all_reduce_eager(self, x: torch.Tensor) -> torch.Tensor:
        """``all_reduce`` outside a compiled graph."""
        if self.size > 1 and (self.shm is None or not self.shm.try_sum(x)):
            dist.all_reduce(x)
        return x

    def use_shared_memory(self) -> bool:
        """Switch all_reduce to a file in shared memory when every rank can map it (all on
        this host); every rank must call this, and all end up on the same path."""
        info: dict[str, Any] = {"path": "", "token": 0}
        path: Path | None = None
        if self.leader:
            try:
                self.shm, path, token = ShmAllReduce.create(self.size)
                info = {"path": str(path), "token": token}
            except (OSError, RuntimeError, ValueError):
                self.shm = None
        info = self.broadcast_json(info)
        if not self.leader and info["path"]:
            self.shm = ShmAllReduce.attach(Path(info["path"]), self.rank, self.size,
                                           info["token"])
        ok = torch.tensor([0 if self.shm is None else 1], dtype=torch.int64)
        dist.all_reduce(ok)
        if path is not None:
            path.unlink(missing_ok=True)  # mapped by every rank that could: the name can go
        if int(ok.item()) != self.size:
            self.shm = None
        return self.shm is not None

    def _broadcast_ints(self, values: list[int] | None) -> list[int] | None:
        """Rank 0 sends ``values`` (None = STOP); the others return what it sent."""
        n = torch.empty(1, dtype=torch.int64, device=self.device)
        if self.leader:
            n.fill_(STOP if values is None else len(values))
        dist.broadcast(n, 0)
        length = int(n.item())
        if length == STOP:
            return None
        if self.leader:
            assert values is not None
            data = torch.tensor(values, dtype=torch.int64).to(self.device)
        else:
            data = torch.empty(length, dtype=torch.int64, device=self.device)
        dist.broadcast(data, 0)
        return values if self.leader else data.cpu().tolist()

    def broadcast_json(self, obj: Any = None) -> Any:
        """Rank 0's JSON-able ``obj``, on every rank (settings exchanged once at start)."""
        raw = list(json.dumps(obj).encode()) if self.leader else None
        got = self._broadcast_ints(raw if self.leader else [])
        assert got is not None
        return json.loads(bytes(got).decode())

    def send_step(self, ids: Sequence[int], decode: Sequence[tuple[Sequence[int], int]],
                  prefill: Sequence[tuple[Sequence[int], int, int]], page_size: int) -> None:
        """Rank 0: broadcast one step's forward inputs (only the pages each sequence uses)."""
        flat = [len(ids), len(decode), len(prefill), *ids]
        for pages, kv_len in decode:
            used = list(pages[: -(-kv_len // page_size)])
            flat += [kv_len, len(used), *used]
        for pages, start, n in prefill:
            used = list(pages[: -(-(start + n) // page_size)])
            flat += [start, n, len(used), *used]
        self._broadcast_ints(flat)

    def recv_step(self) -> StepInputs | None:
        """Ranks > 0: the next step's ``(ids, decode, prefill)``, or None when told to stop."""
        flat = self._broadcast_ints([])
        if flat is None:
            return None
        n_ids, n_decode, n_prefill = flat[:3]
        at = 3 + n_ids
        ids = flat[3:at]
        decode: list[tuple[list[int], int]] = []
        for _ in range(n_decode):
            kv_len, npages = flat[at], flat[at + 1]
            decode.append((flat[at + 2: at + 2 + npages], kv_len))
            at += 2 + npages
        prefill: list[tuple[list[int], int, int]] = []
        for _ in range(n_prefill):
            start, n, npages = flat[at: at + 3]
            prefill.append((flat[at + 3: at + 3 + npages], start, n))
            at += 3 + npages
        return ids, decode, prefill

    def send_stop(self) -> None:
        """Rank 0: tell the followers to leave their loop."""
        self._broadcast_ints(None)

    def close(self) -> None:
        """Leave the process group."""
        if dist.is_initialized():
            dist.destroy_process_group()


def init_tensor_parallel(addr: str, port: int, rank: int, size: int, device: torch.device,
                         timeout_s: float = 300.0) -> TensorParallel:
    """Join the group whose rank 0 listens on ``addr:port`` (gloo on CPU, nccl on CUDA).

    Rank 0 hosts the rendezvous store; the others retry for up to ``timeout_s`` until it is up.
    """
    if not 0 <= rank < size:
        raise ValueError(f"rank must be in 0..{size - 1}, got {rank}")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
        if addr in LOOPBACK and "GLOO_SOCKET_IFNAME" not in os.environ:
            ifname = _loopback_ifname()  # keep the data sockets on loopback too
            if ifname:
                os.environ["GLOO_SOCKET_IFNAME"] = ifname
    try:
        store = dist.TCPStore(addr, port, size, is_master=rank == 0,
                              timeout=timedelta(seconds=timeout_s), wait_for_workers=True)
        dist.init_process_group(backend, store=store, rank=rank, world_size=size,
                                timeout=COLLECTIVE_TIMEOUT)
    except (RuntimeError, OSError) as exc:  # torch's DistStoreError is a RuntimeError
        raise RuntimeError(f"tensor-parallel rank {rank}/{size} could not join the group at "
                           f"{addr}:{port} ({backend}) within {timeout_s:.0f} s: {exc}") from exc
    tp = TensorParallel(rank, size, device)
    if backend == "gloo" and os.environ.get("MINISGL_TP_SHM", "1") != "0":
        tp.use_shared_memory()  # gloo's all_reduce costs ~1 ms; ranks on one host skip it
    return tp
