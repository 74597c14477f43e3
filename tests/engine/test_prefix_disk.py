"""Prefix cache disk tier: restarts served from disk, two writers on one DIR, damaged files, LRU."""

from __future__ import annotations

import logging
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from minisgl_core.engine import prefix_disk
from minisgl_core.engine.engine import Engine
from minisgl_core.engine.prefix_files import HEADER_SIZE, SUFFIX, PageFiles, PageShape
from minisgl_core.wire.schema import SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
ARCH = "qwen2"  # its greedy continuations of these prompts vary (not one token repeated)
PAGE = 16
PROMPT = [random.Random(0).randrange(5, 250) for _ in range(100)]  # 6 full pages before the last
FULL_PAGES = (len(PROMPT) - 1) // PAGE


def _generate(engine: Engine, prompt: list[int], rid: str) -> tuple[list[int], int]:
    """Greedy tokens of one request and how many prompt tokens came from the cache."""
    engine.add_request(rid, prompt, GREEDY)
    tokens, cached = [], -1
    for out in engine.run_until_idle():
        tokens.extend(out.token_ids)
        cached = out.cached_tokens
    engine.check_idle_invariant()
    return tokens, cached


def _tiers(engine: Engine) -> dict[str, float]:
    return dict(engine.stats().prefix_tiers)


def _page_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob(f"*{SUFFIX}"))


@pytest.fixture(scope="module")
def reference(make_engine: Callable[..., Engine]) -> list[int]:
    """The greedy tokens of PROMPT computed without any cache."""
    engine = make_engine(ARCH, cache="naive")
    return _generate(engine, PROMPT, "ref")[0]


@pytest.fixture(scope="module")
def written(make_engine: Callable[..., Engine],
            tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Engine]:
    """A DIR holding PROMPT's pages, and the (closed) engine that computed them."""
    directory = tmp_path_factory.mktemp("prefix-disk")
    engine = make_engine(ARCH, prefix_cache_dir=str(directory))
    tokens, cached = _generate(engine, PROMPT, "first")
    assert cached == 0
    engine.close()  # the writer's queue is written before close returns
    assert _tiers(engine)["prefix_cache_disk_written_bytes_total"] > 0
    return directory, engine


def _slots(engine: Engine, pages: list[int]) -> list[int]:
    return [p * PAGE + i for p in pages for i in range(PAGE)]


def _prompt_pages(engine: Engine) -> list[int]:
    cache = engine.batcher.cache
    assert cache is not None
    return cache.match(PROMPT)[1]


def test_a_restarted_engine_serves_the_prefix_from_disk(
        make_engine: Callable[..., Engine], written: tuple[Path, Engine],
        reference: list[int], tmp_path: Path) -> None:
    directory, first = written
    shutil.copytree(directory, tmp_path / "d")
    engine = make_engine(ARCH, prefix_cache_dir=str(tmp_path / "d"))
    tokens, cached = _generate(engine, PROMPT, "again")
    assert tokens == reference
    assert cached == FULL_PAGES * PAGE
    tiers = _tiers(engine)
    assert tiers["prefix_cache_disk_hit_tokens_total"] == FULL_PAGES * PAGE
    assert tiers["prefix_cache_ram_hit_tokens_total"] == 0
    assert tiers["prefix_cache_disk_read_bytes_total"] > 0
    # the pages read from disk hold bit for bit the keys and values the first engine computed
    old, new = _slots(first, _prompt_pages(first)), _slots(engine, _prompt_pages(engine))
    assert first.kv.k[:, old].equal(engine.kv.k[:, new])
    assert first.kv.v[:, old].equal(engine.kv.v[:, new])
    # the second time they are in RAM
    tokens, cached = _generate(engine, PROMPT, "third")
    assert tokens == reference and cached == FULL_PAGES * PAGE
    assert _tiers(engine)["prefix_cache_ram_hit_tokens_total"] == FULL_PAGES * PAGE
    engine.close()


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "foreign"])
def test_a_damaged_file_is_skipped_deleted_and_computed(
        make_engine: Callable[..., Engine], written: tuple[Path, Engine], reference: list[int],
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    directory, first = written
    shutil.copytree(directory, tmp_path / "d")
    cache = first.batcher.cache
    assert cache is not None
    node, _ = cache.match(PROMPT[:3 * PAGE])  # the third page of the prompt
    victim = next(p for p in _page_files(tmp_path / "d") if p.stem == node.digest.hex())
    data = bytearray(victim.read_bytes())
    if damage == "corrupt":
        data[HEADER_SIZE + 100] ^= 0xFF
    elif damage == "truncated":
        data = data[:len(data) // 2]
    else:  # the header of another model: same shape, another fingerprint
        data[12:28] = bytes(16)
    victim.write_bytes(bytes(data))
    engine = make_engine(ARCH, prefix_cache_dir=str(tmp_path / "d"))
    with caplog.at_level(logging.WARNING, logger="minisgl_core.engine.prefix_files"):
        tokens, cached = _generate(engine, PROMPT, "damaged")
    assert tokens == reference
    assert cached == 2 * PAGE  # the two pages before the damaged one
    lines = [r.getMessage() for r in caplog.records if "skipped and deleted" in r.getMessage()]
    assert len(lines) == 1 and victim.name in lines[0]
    expected = {"corrupt": "checksum", "truncated": "truncated", "foreign": "another model"}
    assert expected[damage] in lines[0]
    engine.close()  # the pages computed again are written again, whole
    assert victim.is_file() and victim.stat().st_size == len(first_file_bytes(directory, victim))


def first_file_bytes(directory: Path, damaged: Path) -> bytes:
    """The undamaged file of the same page in the module's DIR."""
    return next(p for p in _page_files(directory) if p.name == damaged.name).read_bytes()


_WRITER = """
import sys
from minisgl_core.engine.config import EngineConfig
from minisgl_core.engine import prefix_disk
from minisgl_core.engine.engine import Engine
from minisgl_core.plugin.model_lookup import resolve
from minisgl_core.wire.schema import SamplingParams
model, directory, prompt = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
r = resolve(model)
engine = Engine(EngineConfig(model=r.path, dtype="float32", num_threads=1,
                             prefix_cache_dir=directory), r.model_class)
for i in range(3):  # the same pages again and again: both processes race to write them
    engine.add_request(str(i), prompt[:len(prompt) - i], SamplingParams(max_tokens=4))
    list(engine.run_until_idle())
    engine.batcher.cache.evict(engine.num_pages)  # recompute (and rewrite) next time
engine.close()
"""


def test_two_processes_write_one_dir_at_once(
        make_engine: Callable[..., Engine], tiny_models: dict[str, Path], reference: list[int],
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "shared"
    args = [sys.executable, "-c", _WRITER, str(tiny_models[ARCH]), str(directory),
            ",".join(map(str, PROMPT))]
    procs = [subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
    files = _page_files(directory)
    assert len(files) >= FULL_PAGES
    assert not list(directory.rglob("*.tmp"))
    engine = make_engine(ARCH, prefix_cache_dir=str(directory))
    with caplog.at_level(logging.WARNING, logger="minisgl_core.engine.prefix_files"):
        tokens, cached = _generate(engine, PROMPT, "shared")
    assert tokens == reference and cached == FULL_PAGES * PAGE
    assert not [r for r in caplog.records if "skipped" in r.getMessage()]
    engine.close()


def _shape() -> PageShape:
    return PageShape(layers=2, page_size=4, kv_heads=1, head_dim=8, dtype="float32", itemsize=4)


def test_the_budget_evicts_the_least_recently_used(tmp_path: Path) -> None:
    shape = _shape()
    size = HEADER_SIZE + shape.payload_bytes
    files = PageFiles(tmp_path, b"f" * 16, shape, budget_bytes=10 * size)
    keys = [bytes([i]) * 16 for i in range(4)]
    payload = bytes(shape.payload_bytes)
    now = time.time()
    for age, key in zip((40, 30, 20, 10), keys, strict=True):
        files.write(key, payload)
        os.utime(files.path(key), (now - age, now - age))
    assert files.read(keys[0]) is not None  # used now: the newest
    files.budget_bytes = 2 * size
    assert files.scan_and_evict() == 2 * size
    assert [files.has(k) for k in keys] == [True, False, False, True]
    assert files.used_bytes == 2 * size


def test_an_engine_keeps_its_dir_under_the_budget(
        make_engine: Callable[..., Engine], tmp_path: Path) -> None:
    engine = make_engine(ARCH, prefix_cache_dir=str(tmp_path), prefix_cache_disk_gb=1e-9)
    disk = engine.prefix_disk
    assert disk is not None
    budget_pages = 3
    disk.files.budget_bytes = budget_pages * (HEADER_SIZE + disk.shape.payload_bytes)
    for i in range(3):
        prompt = [random.Random(10 + i).randrange(5, 250) for _ in range(70)]
        _generate(engine, prompt, f"r{i}")
        disk.flush()
    engine.close()
    assert len(_page_files(tmp_path)) <= budget_pages
    assert disk.files.used_bytes <= disk.files.budget_bytes


def test_a_full_queue_drops_writes_and_eviction_saves_them_later(
        make_engine: Callable[..., Engine], reference: list[int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(ARCH, prefix_cache_dir=str(tmp_path))
    monkeypatch.setattr(prefix_disk, "MAX_PENDING_BYTES", 0)  # every save finds the queue full
    assert _generate(engine, PROMPT, "dropped")[0] == reference
    engine.prefix_disk.flush()
    assert _tiers(engine)["prefix_cache_disk_dropped_pages_total"] >= FULL_PAGES
    assert not _page_files(tmp_path)
    monkeypatch.undo()
    cache = engine.batcher.cache
    assert cache is not None and cache.evict(cache.num_pages) >= FULL_PAGES
    engine.close()  # the evicted pages were copied out and are written now
    assert len(_page_files(tmp_path)) >= FULL_PAGES
    again = make_engine(ARCH, prefix_cache_dir=str(tmp_path))
    assert _generate(again, PROMPT, "again") == (reference, FULL_PAGES * PAGE)
    again.close()


def test_bfloat16_pages_come_back_bit_for_bit(make_engine: Callable[..., Engine],
                                             tmp_path: Path) -> None:
    first = make_engine(ARCH, dtype="bfloat16", prefix_cache_dir=str(tmp_path))
    tokens, _ = _generate(first, PROMPT, "bf16")
    first.close()
    again = make_engine(ARCH, dtype="bfloat16", prefix_cache_dir=str(tmp_path))
    assert _generate(again, PROMPT, "bf16-again") == (tokens, FULL_PAGES * PAGE)
    old, new = _slots(first, _prompt_pages(first)), _slots(again, _prompt_pages(again))
    assert first.kv.k[:, old].equal(again.kv.k[:, new])
    assert first.kv.v[:, old].equal(again.kv.v[:, new])
    # another dtype is another fingerprint: a float32 engine finds none of these pages
    other = make_engine(ARCH, prefix_cache_dir=str(tmp_path))
    assert _generate(other, PROMPT, "fp32")[1] == 0
    other.close()
    again.close()
