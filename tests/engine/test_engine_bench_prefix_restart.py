"""The prefix-cache restart benchmark on a tiny model: cold, RAM and disk runs agree."""

from __future__ import annotations

from pathlib import Path

from minisgl_core.bench import prefix_restart


def test_restart_benchmark_serves_every_prompt_from_disk(tiny_models: dict[str, Path],
                                                         tmp_path: Path) -> None:
    lines: list[str] = []
    results = prefix_restart.run(str(tiny_models["qwen2"]), lengths=(64, 200), threads=1, repeat=2,
                                 directory=str(tmp_path), drop_caches=True,
                                 say=lines.append)
    assert [r.prompt_tokens for r in results] == [64, 200]
    for r in results:
        assert r.same_tokens
        assert r.disk_hit_tokens == (r.prompt_tokens - 1) // 16 * 16  # every full page
        assert r.disk_read_bytes > 0 and min(r.cold_ms, r.ram_ms, r.disk_ms) > 0
        assert 0 < r.disk_read_s < r.disk_ms / 1e3 and r.disk_gbps > 0
    table = prefix_restart.markdown(results, read_gbps=1.0)
    assert table.count("| yes |") == 2 and "1000 MB/s" in table
    assert any("evicted from the OS page cache" in line for line in lines)
    assert prefix_restart.sequential_read_gbps(tmp_path, size=8 << 20, drop=True) > 0
