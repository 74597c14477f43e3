"""All-reduce through shared memory, for tensor-parallel ranks on one host (CPU, fp32).

gloo's all_reduce costs ~1.25 ms between two processes on a 2-core machine, and a step makes two
per layer. Here each rank copies its partial result into its own slot of a file mapped by every
rank, raises its sequence number, waits for every rank's, then sums the slots in rank order:
the same order on every rank, so every rank ends with bitwise the same tensor, as with gloo.
Two banks of slots alternate, so a rank that runs ahead writes into the bank nobody reads
anymore (it cannot get two calls ahead: each call waits for everyone).
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HEADER = 128  # int64s before the slots: [0] the token, [1 + r] rank r's sequence number,
MAX_RANKS = 63  # [PIDS + r] rank r's pid (a peer that died is noticed while waiting for it)
PIDS = 64
CAPACITY = 1 << 21  # fp32 elements per slot (8 MiB); larger tensors go through gloo
SPIN = 2000  # polls before each yield to the OS scheduler
TIMEOUT_S = 120.0  # a peer that never arrives is dead: fail rather than hang


def shm_dir() -> Path:
    """Where the mapped file lives: /dev/shm (RAM) when present, else the temp folder."""
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


class ShmAllReduce:
    """One rank's view of the shared file; ``try_sum`` does the all-reduce or declines."""

    def __init__(self, path: Path, rank: int, size: int, *, create: bool) -> None:
        if size > MAX_RANKS:
            raise ValueError(f"shared-memory all-reduce supports up to {MAX_RANKS} ranks")
        nbytes = 8 * HEADER + 2 * size * CAPACITY * 4
        if create:
            with open(path, "wb") as f:
                f.truncate(nbytes)
        raw = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
        self.flags: np.ndarray = raw[: 8 * HEADER].view(torch.int64).numpy()  # [HEADER]
        self.banks = raw[8 * HEADER:].view(torch.float32).view(2, size, CAPACITY)
        self.rank, self.size, self.seq = rank, size, 0

    @classmethod
    def create(cls, size: int) -> tuple[ShmAllReduce, Path, int]:
        """Rank 0: a new file and the token the others must find in it."""
        fd, name = tempfile.mkstemp(prefix="minisgl-tp-", dir=shm_dir())
        os.close(fd)
        path = Path(name)
        try:
            shm = cls(path, 0, size, create=True)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        token = secrets.randbits(62) + 1
        shm.flags[0] = token
        shm.flags[PIDS] = os.getpid()
        return shm, path, token

    @classmethod
    def attach(cls, path: Path, rank: int, size: int, token: int) -> ShmAllReduce | None:
        """Ranks > 0: the same file, or None when it is not here (another host) or not it."""
        try:
            shm = cls(path, rank, size, create=False)
        except (OSError, RuntimeError):
            return None
        if int(shm.flags[0]) != token:
            return None
        shm.flags[PIDS + rank] = os.getpid()
        return shm

    def try_sum(self, x: torch.Tensor) -> bool:
        """Sum ``x`` over the ranks in place; False (nothing done) when it does not fit here.

        Every rank calls with the same shape, so every rank declines the same calls.
        """
        n = x.numel()
        if n > CAPACITY or x.dtype != torch.float32 or x.device.type != "cpu" \
                or not x.is_contiguous():
            return False
        self.seq += 1
        bank = self.banks[self.seq % 2]  # [size, CAPACITY]
        flat = x.view(-1)
        bank[self.rank, :n].copy_(flat)
        self.flags[1 + self.rank] = self.seq  # after the data: x86 keeps stores in order
        self._wait_all()
        flat.copy_(bank[0, :n])
        for r in range(1, self.size):  # rank order, the same on every rank
            flat.add_(bank[r, :n])
        return True

    def _wait_all(self) -> None:
        flags, seq, deadline = self.flags, self.seq, 0.0
        for r in range(self.size):
            polls = 0
            while flags[1 + r] < seq:
                polls += 1
                if polls % SPIN == 0:
                    os.sched_yield()  # a peer may need this core to finish its shard
                    self._check_alive(r)
                    now = time.monotonic()
                    deadline = deadline or now + TIMEOUT_S
                    if now > deadline:
                        raise RuntimeError(f"tensor-parallel rank {r} did not reach all-reduce "
                                           f"{seq} within {TIMEOUT_S:.0f} s")

    def _check_alive(self, r: int) -> None:
        pid = int(self.flags[PIDS + r])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise RuntimeError(f"tensor-parallel rank {r} (pid {pid}) is gone") from None
        except PermissionError:  # alive, another user's: not ours to judge
            pass
