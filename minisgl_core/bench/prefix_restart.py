"""Prefix-cache restart benchmark: TTFT of long prompts cold, from RAM, from disk after a restart.

For each prompt length (1k, 4k and 8k tokens by default; capped at the model's context) one
distinct prompt goes to an engine whose ``prefix_cache_dir`` is an empty directory: first cold
(nothing cached anywhere), then again (its pages in RAM). The engine is closed (its writer
finishes), a new engine is built on the same directory and each prompt is sent once more: its
pages come from disk. TTFT is the time from ``add_request`` to the end of the step that returns
the first token; every run is greedy and its tokens must equal the cold run's. With
``drop_caches`` the page files are evicted from the OS page cache before the disk runs
(``posix_fadvise(DONTNEED)`` on each, after a sync), so they are read from the device rather than
from memory; the host's sequential read rate of a file in the same directory is measured the same
way, for comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from minisgl_core.bench.prefix_cache import system_prompt
from minisgl_core.sampling import SamplingParams

LENGTHS = (1024, 4096, 8192)
MAX_TOKENS = 4
PROBE_BYTES = 512 * 1024 * 1024  # the sequential read probe's file


@dataclass(frozen=True)
class RestartResult:
    """One prompt length: TTFT cold, from RAM, from disk, and what the disk load read."""

    prompt_tokens: int
    cold_ms: float
    ram_ms: float
    disk_ms: float
    disk_hit_tokens: int
    disk_read_bytes: int
    disk_read_s: float  # of the disk run's TTFT, the time spent loading its pages
    same_tokens: bool  # the RAM and disk runs generated the cold run's tokens

    @property
    def disk_gbps(self) -> float:
        """GB/s of the disk tier's load: page files read, checked and copied into the pool."""
        return self.disk_read_bytes / max(self.disk_read_s, 1e-9) / 1e9


def drop_page_cache(paths: Sequence[Path]) -> bool:
    """Write dirty pages out and evict the files ``paths`` from the OS page cache; False where
    the OS cannot be asked to."""
    if not hasattr(os, "posix_fadvise"):
        return False
    os.sync()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def sequential_read_gbps(directory: Path, size: int = PROBE_BYTES, drop: bool = False) -> float:
    """GB/s of reading a ``size``-byte file of ``directory`` once from start to end."""
    path = directory / "read-probe.bin"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size // len(block)):
            f.write(block)
    if drop:
        drop_page_cache([path])
    buf = bytearray(8 << 20)
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    seconds = time.perf_counter() - start
    path.unlink()
    return size / seconds / 1e9


def prompts_of(tokenizer: Any, lengths: Sequence[int]) -> list[list[int]]:
    """One prompt per length, no two sharing a first page (each starts with its own title)."""
    out = []
    for n in lengths:
        ids = tokenizer.encode(f"Report {n}. " + system_prompt(tokenizer, n))
        out.append([int(t) for t in ids[:n]])
    return out


def _ttft(engine: Any, rid: str, prompt: list[int]) -> tuple[float, list[int]]:
    """Seconds to the first token and all generated tokens of one greedy request."""
    sp = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    engine.add_request(rid, prompt, sp)
    first, tokens = None, []
    for _ in range(1_000_000):
        if not engine.has_work():
            break
        for out in engine.step():
            first = first if first is not None else time.perf_counter() - start
            tokens.extend(out.token_ids)
    assert first is not None
    return first, tokens


def _disk_run(engine: Any, rid: str, prompt: list[int], *, again: bool,
              drop: bool) -> tuple[float, int, int, float, list[int]]:
    """TTFT, tokens loaded, bytes read, load seconds and generated tokens of one run from disk;
    ``again``: the RAM tier is emptied first (and with ``drop`` the files leave the page cache)."""
    disk = engine.prefix_disk
    if again:
        engine.batcher.cache.evict(engine.num_pages)
        disk.flush()  # pages it had not written before the eviction
        if drop:
            drop_page_cache(list(disk.files.folder.rglob("*.kvp")))
    hits, read, read_s = disk.hit_tokens, disk.read_bytes, disk.read_seconds
    seconds, tokens = _ttft(engine, rid, prompt)
    return (seconds, disk.hit_tokens - hits, disk.read_bytes - read, disk.read_seconds - read_s,
            tokens)


def run(model: str | None = None, *, lengths: Sequence[int] = LENGTHS, threads: int | None = None,
        dtype: str = "float32", directory: str | None = None, drop_caches: bool = False,
        repeat: int = 3, say: Any = print) -> list[RestartResult]:
    """Every length cold, from RAM, and from disk in a new engine; results by length. The cold
    run is one (it is the first time); the RAM and disk runs take the best of ``repeat`` (a
    disk run after the first empties the RAM tier first)."""
    from minisgl_core.engine.config import EngineConfig
    from minisgl_core.engine.engine import Engine
    from minisgl_core.plugin.model_lookup import resolve

    resolved = resolve(model)
    work = Path(directory or tempfile.mkdtemp(prefix="minisgl-prefix-"))
    cache_dir = work / "prefix-cache"
    if cache_dir.exists():  # cold means cold: nothing of an earlier run
        shutil.rmtree(cache_dir)

    def engine() -> Engine:
        # room for the longest prompt: a pool of its pages, not the default byte budget
        config = EngineConfig(model=str(resolved.path), dtype=dtype, num_threads=threads,
                              num_pages=max(lengths) // 16 + 16, prefix_cache_dir=str(cache_dir))
        return Engine(config, resolved.model_class)

    first = engine()
    context = first.max_seq_len - MAX_TOKENS - 1
    prompts = prompts_of(first.tokenizer, [min(n, context) for n in lengths])
    warm = [int(t) for t in first.tokenizer.encode("Hello there, how are you today?")]
    _ttft(first, "warm", warm)  # first-call costs out of the way (a page of no prompt)
    cold, ram = {}, {}
    for i, p in enumerate(prompts):
        cold[i] = _ttft(first, f"cold-{i}", p)
        ram[i] = [_ttft(first, f"ram-{i}-{k}", p) for k in range(repeat)]
    first.close()
    del first
    dropped = drop_page_cache(list(cache_dir.rglob("*.kvp"))) if drop_caches else False
    say(f"model {Path(resolved.path).name} ({dtype}); pages in {cache_dir}; files "
        f"{'evicted from' if dropped else 'left in'} the OS page cache before the disk runs; "
        f"RAM and disk runs: the best of {repeat}")
    second = engine()
    _ttft(second, "warm", warm)
    results = []
    for i, p in enumerate(prompts):
        runs = [_disk_run(second, f"disk-{i}-{k}", p, again=k > 0, drop=drop_caches)
                for k in range(repeat)]
        best = min(runs)
        same = all(t == cold[i][1] for _, t in ram[i]) and all(r[4] == cold[i][1] for r in runs)
        r = RestartResult(len(p), 1e3 * cold[i][0], 1e3 * min(ram[i])[0], 1e3 * best[0],
                          best[1], best[2], best[3], same)
        say(f"  {r.prompt_tokens:5d} tokens: cold {r.cold_ms:8.1f} ms, RAM {r.ram_ms:7.1f} ms, "
            f"disk {r.disk_ms:7.1f} ms ({r.disk_hit_tokens} tokens, "
            f"{r.disk_read_bytes / 1e6:.0f} MB read in {r.disk_read_s * 1e3:.0f} ms)")
        results.append(r)
    second.close()
    if directory is None:
        shutil.rmtree(work, ignore_errors=True)
    return results


def markdown(results: Sequence[RestartResult], read_gbps: float | None = None) -> str:
    """The table, and the disk run's TTFT against the cold one's."""
    lines = ["| prompt tokens | cold TTFT ms | RAM TTFT ms | disk TTFT ms (after restart) | "
             "disk / cold | MB read | load MB/s | same tokens |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r.prompt_tokens} | {r.cold_ms:.1f} | {r.ram_ms:.1f} | {r.disk_ms:.1f} | "
                     f"{r.disk_ms / r.cold_ms:.3f}x | {r.disk_read_bytes / 1e6:.0f} | "
                     f"{r.disk_gbps * 1e3:.0f} | {'yes' if r.same_tokens else 'NO'} |")
    if read_gbps is not None:
        lines += ["", f"Sequential read of one {PROBE_BYTES >> 20} MiB file in the same directory: "
                  f"{read_gbps * 1e3:.0f} MB/s."]
    return "\n".join(lines)


def main(model: str | None = None, lengths: Sequence[int] = LENGTHS, threads: int | None = None,
         dtype: str = "float32", directory: str | None = None, drop_caches: bool = False,
         repeat: int = 3, json_lines: bool = False) -> int:
    """Print the table (or JSON lines); exit status 1 if a run from RAM or disk changed a
    greedy output."""
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if json_lines else print
    results = run(model, lengths=lengths, threads=threads, dtype=dtype, directory=directory,
                  drop_caches=drop_caches, repeat=repeat, say=say)
    read_gbps = sequential_read_gbps(Path(directory or tempfile.gettempdir()), drop=drop_caches)
    if json_lines:
        for r in results:
            print(json.dumps({**asdict(r), "read_probe_gbps": read_gbps}), flush=True)
    else:
        print(markdown(results, read_gbps))
    return int(not all(r.same_tokens for r in results))
