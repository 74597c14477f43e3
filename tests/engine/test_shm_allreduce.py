"""The shared-memory all-reduce of tensor-parallel ranks on one host: the same sums as gloo."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minisgl_core.engine.shm_allreduce import PIDS, ShmAllReduce
from minisgl_core.testing.tp import all_reduce_rank, run_ranks


@pytest.mark.parametrize("size", [2, 3])
def test_shared_memory_sums_equal_on_every_rank(size: int) -> None:
    got = run_ranks(all_reduce_rank, size, True, timeout=300)
    assert all(out["shm"] for out in got.values())
    for i in range(3):
        sums = [got[r]["sums"][i] for r in range(size)]
        assert all(s == sums[0] for s in sums)  # bitwise: every rank goes on from one state
        torch.testing.assert_close(torch.tensor(sums[0]), torch.tensor(got[0]["gloo"][i]))
    # a tensor too big for a slot goes through gloo
    assert all(out["big"] == sum(range(1, size + 1)) for out in got.values())


def test_switched_off_uses_gloo() -> None:
    got = run_ranks(all_reduce_rank, 2, False, timeout=300)
    assert not any(out["shm"] for out in got.values())
    assert got[0]["sums"][0] == got[0]["gloo"][0]


def test_attach_refuses_a_file_that_is_not_the_one(tmp_path: Path) -> None:
    shm, path, token = ShmAllReduce.create(2)
    try:
        assert ShmAllReduce.attach(path, 1, 2, token) is not None
        assert ShmAllReduce.attach(path, 1, 2, token + 1) is None
        assert ShmAllReduce.attach(tmp_path / "missing", 1, 2, token) is None
    finally:
        path.unlink()


def test_a_rank_that_is_gone_fails_the_wait() -> None:
    import subprocess
    import sys

    shm, path, token = ShmAllReduce.create(2)
    try:
        peer = ShmAllReduce.attach(path, 1, 2, token)
        assert peer is not None
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        peer.flags[PIDS + 1] = int(dead.stdout)  # rank 1 is a process that has exited
        with pytest.raises(RuntimeError, match="rank 1 .* is gone"):
            shm.try_sum(torch.ones(4))  # rank 1 never arrives
    finally:
        path.unlink()
